"""The stock demo's wall time (``etlstage run stages.yaml --once`` on the embedded
defaults, in a fresh folder each run), for this checkout and other code, in turn.

    python bench/demo_time.py --rounds 3 --arm "old=/path/to/checkout"
    python bench/demo_time.py --rounds 3 --floor

With ``--floor``, each round also runs bench/workers/delta_floor_job.py: a bare PySpark
session with the loader's Delta jars writing 5,000 rows of ~1 KB as a new Delta table —
a floor under the demo's loader (its JVM, session and first commit), none of etlstage in it.

An arm is a PYTHONPATH put in front of this checkout's installed packages: a checkout's
root puts its supervisor (``etlstage``) first; a folder holding an ``etlstage_workers``
package puts its workers first (both: join them with ``:``).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--arm", action="append", default=[], help="NAME=PYTHONPATH")
    ap.add_argument("--floor", action="store_true", help="also a bare PySpark + Delta write of 5,000 rows")
    a = ap.parse_args()
    demo = [sys.executable, "-m", "etlstage.cli", "run", "stages.yaml", "--once", "--no-progress"]
    arms = {"this checkout": (demo, str(ROOT)), **{n: (demo, p) for n, p in (x.split("=", 1) for x in a.arm)}}
    if a.floor:
        arms["bare PySpark + Delta"] = (
            [sys.executable, str(ROOT / "bench/workers/delta_floor_job.py"), "t", "5000"],
            "",
        )
    times: dict[str, list[float]] = {name: [] for name in arms}
    for r in range(a.rounds):
        for name, (argv, path) in arms.items():
            work = Path(tempfile.mkdtemp(prefix="etlstage-demo-bench-"))
            shutil.copy(ROOT / "stages.yaml", work / "stages.yaml")
            env = {**os.environ, "PYTHONPATH": path} if path else dict(os.environ)
            started = time.perf_counter()
            done = subprocess.run(argv, cwd=work, env=env, capture_output=True, text=True)
            seconds = time.perf_counter() - started
            if done.returncode != 0:
                raise SystemExit(f"{name}: exit {done.returncode}\n{done.stderr[-3000:]}")
            times[name].append(seconds)
            print(f"round {r + 1} {name}: {seconds:.1f} s", flush=True)
            shutil.rmtree(work, ignore_errors=True)
    for name, seconds in times.items():
        print(f"median of {a.rounds}, {name}: {statistics.median(seconds):.1f} s (min {min(seconds):.1f})")


if __name__ == "__main__":
    main()
