"""The driver JVM's JIT settings in the loader's own Delta session: start, first batch, and
the steady state, side by side.

    python bench/jit_steady.py [--options=-XX:TieredStopAtLevel=1] [--n 50000] [--batches 8] [--rounds 1]

Each round runs, one after the other, a fresh JVM with Spark's defaults and one with
``--options`` (``spark.driver.extraJavaOptions``; class data sharing off in both, so
that only the JIT differs): the session start, then ``--batches`` RDSS batches of ``--n``
messages merged into their three Delta tables (the loader's :func:`lake.commit_batch`).
Per arm: session seconds, the first batch, the median of the second half of the batches,
and the JVM's CPU seconds over that half. Figures: docs/performance.md, "Start-up: a
lighter JIT for short runs".
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def one_jvm(options: str, n: int, batches: int) -> dict[str, float]:
    """In this process: a session with ``options``, then the batches; the figures."""
    import psutil
    from etlstage_workers.spark import lake
    from etlstage_workers.spark.config import LoaderConfig

    from bench.lake import at_once, fresh, mixed_batch
    from etlstage.spark.setup.jars import fetch_named
    from etlstage.spark.setup.spark_session import start_session

    conf = {**lake.DELTA_SESSION, "spark.jars": ",".join(str(j) for j in fetch_named("delta")),
            "spark.ui.showConsoleProgress": "false"}  # fmt: skip
    if options:
        conf["spark.driver.extraJavaOptions"] = options
    t0 = time.perf_counter()
    spark = start_session("local[2]", "bench-jit", conf, connect_timeout=10, log_level="ERROR")
    session = time.perf_counter() - t0
    jvm = [c for c in psutil.Process().children(recursive=True) if "java" in c.name()]
    config = LoaderConfig(output="unused", format="delta", rdss=True).check()
    prepared = mixed_batch(n, config)
    times: list[float] = []
    cpu_from = 0.0
    with tempfile.TemporaryDirectory(prefix="bench-jit-") as root:
        for b in range(batches):
            if b == batches // 2:
                cpu_from = sum(sum(p.cpu_times()[:2]) for p in jvm)
            t = time.perf_counter()
            at_once(spark, config, root, fresh(prepared, b))
            times.append(time.perf_counter() - t)
        cpu = sum(sum(p.cpu_times()[:2]) for p in jvm) - cpu_from
    spark.stop()
    return {"session": session, "first": times[0], "steady": statistics.median(times[batches // 2 :]), "cpu": cpu}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--options", default="-XX:TieredStopAtLevel=1")
    ap.add_argument("--n", type=int, default=50000)
    ap.add_argument("--batches", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--one", metavar="OPTIONS", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.one is not None:
        print(json.dumps(one_jvm(a.one, a.n, a.batches)))
        return
    arms = {"Spark's defaults": "", a.options: a.options}
    env = {**os.environ, "ETLSTAGE_SPARK_CDS": "off"}
    got: dict[str, list[dict[str, float]]] = {arm: [] for arm in arms}
    for _ in range(a.rounds):
        for arm, options in arms.items():
            out = subprocess.run([sys.executable, __file__, f"--one={options}", "--n", str(a.n), "--batches",
                                  str(a.batches)], capture_output=True, text=True, check=True, env=env).stdout  # fmt: skip
            got[arm].append(json.loads(out.strip().splitlines()[-1]))
    print(f"{a.batches} batches of {a.n} RDSS messages into 3 Delta tables, local[2], {a.rounds} round(s):")
    for arm, runs in got.items():
        med = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
        print(f"  {arm:28} session {med['session']:.2f} s, first batch {med['first']:.2f} s, "
              f"steady {med['steady']:.2f} s per batch, JVM CPU over the second half {med['cpu']:.1f} s")  # fmt: skip


if __name__ == "__main__":
    main()
