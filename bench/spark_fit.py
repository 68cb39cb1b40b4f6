"""The Spark loader's cost per batch: a fit ``seconds per batch = fixed + per message x size``
over batch sizes, next to a baseline version of the loader measured in the same run.

    python bench/spark_fit.py [--sizes 1000,2000,5000,10000,20000,50000,100000] [--baseline REF]
                              [--master local[2]] [--repeat 1] [--formats parquet,delta]

After a warm-up of ``--warmup`` batches of 1,000 (the JVM compiles Spark's write path
over its first ~50 jobs, which then cost 2-3x a warm one: start-up, not cost per batch),
each measurement is the worker as it runs (``etlstage-spark-load --rdss`` behind the SDK's
loop over framed batches: keys and key index, staging, Spark, fsync, publish, commit,
the next batch parsed while the previous one is written), after one warm-up batch, on
RDSS messages of ~1.15 KB routed to the three tables (80 % valid, 10 % invalid, 10 %
error).  Every size loads into a fresh dataset; one Spark session serves all sizes of one
version.  ``--baseline REF`` (a git commit, e.g. ``main``) measures that commit's loader
(``workers/``, unpacked with ``git archive``) with the same bench code, before the current
one, in the same run.  ``--formats parquet,delta`` fits the loader with each ``--format``
(a process each, one after the other, ``--repeat`` times in turn): Delta's MERGE against
the plain-Parquet path (staging, key index, publish), both exactly once by key.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))


def least_squares(points: list[tuple[float, float]]) -> tuple[float, float]:
    """(intercept, slope) of the least-squares line through ``points``.

    >>> least_squares([(1, 3.0), (2, 5.0), (3, 7.0)])
    (1.0, 2.0)
    """
    n = len(points)
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    slope = sum((x - mx) * (y - my) for x, y in points) / sum((x - mx) ** 2 for x, _ in points)
    return my - slope * mx, slope


def routed(messages: list[bytes]) -> list[bytes]:
    """Every tenth message (from the second) invalid, every tenth (from the third) an error."""
    import orjson

    out = []
    for i, m in enumerate(messages):
        code = {1: "GENERR001", 2: "GENERR009"}.get(i % 10)
        if code:
            doc = orjson.loads(m)
            doc["messageHeader"]["errorCode"] = code
            m = orjson.dumps(doc)
        out.append(m)
    return out


def inner(sizes: list[int], master: str, min_messages: int, warmup: int, fmt: str) -> list[dict[str, float]]:
    """This interpreter's loader with ``--format fmt``, every size, one Spark session."""
    from etlstage_workers.spark import lake
    from etlstage_workers.spark.config import LoaderConfig
    from etlstage_workers.spark.loader import SparkLoader
    from etlstage_workers.spark.session import start_session
    from spark_load import batches, framed, make_messages, run_worker, timed

    counts = {b: max(3 * b, min_messages) for b in sizes}
    pool = routed(make_messages(max(max(counts.values()) + max(sizes), warmup * 1000)))
    work = tempfile.mkdtemp(prefix="etlstage-bench-spark-fit-")

    def loader_config(out: str, state: str) -> LoaderConfig:
        return LoaderConfig(output=out, rdss=True, state_dir=state, master=master, format=fmt).check()

    probe = loader_config(os.path.join(work, "probe"), os.path.join(work, "probe-state"))
    conf = lake.session_conf(probe)  # Delta's jars and extension, as the loader's own session
    spark = start_session(
        master, "bench-fit", conf, connect_timeout=10, log_level="WARN", plain_files=not probe.is_table
    )
    rows = []
    try:
        for size in sizes:
            where = os.path.join(work, str(size))
            config = loader_config(os.path.join(where, "out"), os.path.join(where, "state"))
            warm, messages = pool[:size], pool[size : size + counts[size]]
            run_worker(SparkLoader(config, spark=spark), framed([warm], os.path.join(work, "warm.in")), size)
            if size == sizes[0]:  # the JVM's JIT: the first ~50 jobs cost 2-3x a warm one
                spare = loader_config(os.path.join(work, "warm"), os.path.join(work, "warm-state"))
                parts = [pool[i : i + 1000] for i in range(0, warmup * 1000, 1000)]
                run_worker(SparkLoader(spare, spark=spark), framed(parts, os.path.join(work, "warm.in")), 1000)
            stdin = framed(batches(messages, size), os.path.join(work, "stdin"))
            seconds, cpu = timed(lambda: run_worker(SparkLoader(config, spark=spark), stdin, size))  # noqa: B023
            n_batches = -(-len(messages) // size)
            rows.append({"size": size, "batches": n_batches, "seconds": seconds, "cpu": cpu})
            shutil.rmtree(where, ignore_errors=True)
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)
    return rows


def baseline_tree(ref: str, into: Path) -> Path:
    """``ref``'s ``workers/`` unpacked, and a directory that makes it ``etlstage_workers`` first on sys.path."""
    archive = subprocess.run(
        ["git", "-C", str(HERE.parent), "archive", ref, "workers"], capture_output=True, check=False
    )
    if archive.returncode != 0:
        raise SystemExit(f"--baseline {ref!r}: git archive failed: {archive.stderr.decode().strip()}")
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive.stdout, check=True)
    shim = into / "path"
    shim.mkdir()
    (shim / "etlstage_workers").symlink_to(into / "workers")
    return shim


def measure(label: str, args: argparse.Namespace, pythonpath: Path | None, fmt: str) -> dict[str, object]:
    env = dict(os.environ)
    if pythonpath is not None:
        env["PYTHONPATH"] = str(pythonpath) + os.pathsep + env.get("PYTHONPATH", "")
    command = [sys.executable, __file__, "--inner", "--sizes", ",".join(map(str, args.sizes))]
    command += ["--master", args.master, "--min-messages", str(args.min_messages), "--warmup", str(args.warmup)]
    command += ["--format", fmt]
    started = time.perf_counter()
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"{label}: the measurement failed:\n{done.stderr[-3000:]}")
    rows = json.loads(done.stdout.strip().splitlines()[-1])
    fixed, per_message = least_squares([(r["size"], r["seconds"] / r["batches"]) for r in rows])
    cpu_fixed, cpu_per_message = least_squares([(r["size"], r["cpu"] / r["batches"]) for r in rows])
    return {"label": label, "rows": rows, "fixed": fixed, "per_message": per_message, "cpu_fixed": cpu_fixed,
            "cpu_per_message": cpu_per_message, "wall": time.perf_counter() - started}  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="1000,2000,5000,10000,20000,50000,100000")
    ap.add_argument("--baseline", default=None, metavar="REF", help="a git commit whose loader to measure first")
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--min-messages", type=int, default=20000, help="messages per size at least (3 batches at least)")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--warmup", type=int, default=60, help="batches of 1,000 loaded first (JIT warm-up), not measured")
    ap.add_argument("--formats", default="parquet", help="the loader's --format values to fit, in turn")
    ap.add_argument("--format", default="parquet", help=argparse.SUPPRESS)
    ap.add_argument("--inner", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    args.sizes = [int(s) for s in args.sizes.split(",")]
    if args.inner:
        print(json.dumps(inner(args.sizes, args.master, args.min_messages, args.warmup, args.format)))
        return
    results = []
    with tempfile.TemporaryDirectory(prefix="etlstage-bench-baseline-") as tmp:
        shim = baseline_tree(args.baseline, Path(tmp)) if args.baseline else None
        formats = args.formats.split(",")
        for _ in range(args.repeat):
            for fmt in formats:
                suffix = f", {fmt}" if len(formats) > 1 else ""
                if shim is not None:
                    results.append(measure(f"baseline ({args.baseline}){suffix}", args, shim, fmt))
                results.append({**measure(f"this tree{suffix}", args, None, fmt), "format": fmt})
    print(f"\nmaster {args.master}, RDSS mode, three tables; seconds per batch (msg/s, CPU-s per 100k messages)")
    print(f"{'loader':<22}" + "".join(f"{s:>22,}" for s in args.sizes) + f"{'fixed s':>9}{'us/msg':>8}"
          f"{'CPU fixed':>10}{'CPU us/msg':>11}")  # fmt: skip
    for r in results:
        cells = "".join(
            f"  {row['seconds'] / row['batches']:7.3f} ({row['size'] * row['batches'] / row['seconds']:6.0f}, "
            f"{row['cpu'] * 1e5 / (row['size'] * row['batches']):4.1f})"
            for row in r["rows"]  # type: ignore[attr-defined]
        )
        print(
            f"{r['label']:<22}{cells}{r['fixed']:9.3f}{r['per_message'] * 1e6:8.1f}"
            f"{r['cpu_fixed']:10.3f}{r['cpu_per_message'] * 1e6:11.1f}"
        )
    if len(formats) > 1:  # this tree's fits of each format, best and median, against the first format's
        by_format = {f: [float(r["fixed"]) for r in results if r.get("format") == f] for f in formats}  # type: ignore[arg-type]
        base = formats[0]
        for fmt in formats[1:]:
            print(
                f"{fmt} fixed cost per batch / {base}'s: best {min(by_format[fmt]) / min(by_format[base]):.1f}x, "
                f"median {statistics.median(by_format[fmt]) / statistics.median(by_format[base]):.1f}x"
            )


if __name__ == "__main__":
    main()
