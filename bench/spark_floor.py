"""The Spark engine's start-up beside Spark's own floor, in the same run.

    python bench/spark_floor.py [--rounds 3] [--count 20] [--arm NAME=PYTHONPATH ...]

Each round runs, one after the other, each in a fresh folder:
  bare Spark     bench/workers/spark_floor_job.py: a PySpark session on local[2], a Python
                 streaming source of COUNT numbers and a Python streaming writer appending
                 them to a file, availableNow: the least a PySpark engine of this design runs
  lean Spark     bench/workers/spark_lean_floor_job.py: Spark's own text-file source over
                 a file of COUNT numbers, a foreachBatch function appending them, availableNow:
                 the leanest PySpark streaming job that reads a source and appends its records
  spark engine   ``etlstage run --engine spark --master local[2] --once``, E (COUNT numbers)
                 → L (append to a file), both plain Python programs
  supervisor     the same pipeline on the supervisor engine, for scale
  NAME          (--arm) the spark engine's row with other code: PYTHONPATH put in front
                 of this checkout's packages (a checkout's root: its ``etlstage``)
For each: seconds from the command to the first record in the output file (polled every
10 ms), and to the command's end.  Both Spark arms run without a class data archive
(``ETLSTAGE_SPARK_CDS=off``; the bare job never has one) and without ``JAVA_TOOL_OPTIONS``
(``--jvm-as-is`` keeps both as the environment has them: the test suite's smoke, whose
JVMs run with its lighter JIT and archives and whose figures are not measured).
Medians over the rounds; the engine's own start-up phases (its ``start-up:`` line) too.
Figures: docs/performance.md, "Start-up: the floor under the Spark engine".
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

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.timed_run import startup_phases

ROOT = Path(__file__).resolve().parents[1]
TW = ROOT / "tests" / "fixtures" / "tw.py"
FLOOR_JOB = ROOT / "bench" / "workers" / "spark_floor_job.py"
LEAN_FLOOR_JOB = ROOT / "bench" / "workers" / "spark_lean_floor_job.py"


def pipeline(count: int) -> str:
    return (
        "stages:\n"
        f"  - {{name: ext, type: E, command: [{sys.executable}, {TW}, count, '{count}']}}\n"
        f"  - {{name: load, type: L, command: [{sys.executable}, {TW}, append, out.txt]}}\n"
    )


def timed(argv: list[str], folder: Path, out: Path, env: dict[str, str]) -> tuple[float, float, str]:
    """(seconds to the first line in ``out``, seconds to the end, stderr) of one command."""
    started = time.perf_counter()
    first: float | None = None
    with tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(argv, cwd=folder, env=env, stdout=subprocess.DEVNULL, stderr=err, text=True)
        while proc.poll() is None:
            if first is None and out.exists() and out.stat().st_size > 0:
                first = time.perf_counter() - started
            time.sleep(0.01)
        ended = time.perf_counter() - started
        err.seek(0)
        stderr = err.read()
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} in {folder} failed ({proc.returncode}):\n{stderr[-3000:]}")
    if first is None:  # written in the last poll interval: the end bounds it
        first = ended
    return first, ended, stderr


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--count", type=int, default=20)
    ap.add_argument("--arm", action="append", default=[], help="NAME=PYTHONPATH: the spark engine with other code")
    ap.add_argument("--jvm-as-is", action="store_true", help="keep JAVA_TOOL_OPTIONS and the class data setting")
    a = ap.parse_args()
    env = dict(os.environ)
    if not a.jvm_as_is:
        env.pop("JAVA_TOOL_OPTIONS", None)
        env["ETLSTAGE_SPARK_CDS"] = "off"
    run = [sys.executable, "-m", "etlstage.cli", "run", "stages.yaml", "--once", "--no-progress"]
    spark_run = [*run, "--engine", "spark", "--master", "local[2]"]
    arms: dict[str, tuple[list[str], dict[str, str]]] = {
        "bare Spark": ([sys.executable, str(FLOOR_JOB), "out.txt", str(a.count)], env),
        "lean Spark": ([sys.executable, str(LEAN_FLOOR_JOB), "out.txt", str(a.count)], env),
        "spark engine": (spark_run, env),
        **{name: (spark_run, {**env, "PYTHONPATH": path}) for name, path in (arm.split("=", 1) for arm in a.arm)},
        "supervisor": (run, env),
    }
    base = Path(tempfile.mkdtemp(prefix="bench-spark-floor-"))
    firsts: dict[str, list[float]] = {arm: [] for arm in arms}
    ends: dict[str, list[float]] = {arm: [] for arm in arms}
    phases: dict[str, dict[str, list[float]]] = {arm: {} for arm in arms}
    try:
        for r in range(a.rounds):
            for arm, (argv, arm_env) in arms.items():
                folder = Path(tempfile.mkdtemp(prefix=arm.replace(" ", "-") + "-", dir=base))
                (folder / "stages.yaml").write_text(pipeline(a.count))
                first, end, stderr = timed(argv, folder, folder / "out.txt", arm_env)
                lines = (folder / "out.txt").read_text().splitlines()
                if sorted(lines, key=int) != [str(n) for n in range(a.count)]:
                    raise SystemExit(f"{arm}: wrote {len(lines)} lines, not the numbers 0..{a.count - 1}")
                firsts[arm].append(first)
                ends[arm].append(end)
                for phase, v in startup_phases(stderr).items():
                    phases[arm].setdefault(phase, []).append(v)
                print(f"round {r + 1} {arm:12}: first record {first:5.1f} s, end {end:5.1f} s", flush=True)
        print(f"medians of {a.rounds} rounds, {a.count} messages:")
        for arm in arms:
            print(
                f"  {arm:12}: first record {statistics.median(firsts[arm]):5.1f} s "
                f"(min {min(firsts[arm]):.1f}), end {statistics.median(ends[arm]):5.1f} s (min {min(ends[arm]):.1f})"
            )
        for arm, found in phases.items():
            if found:
                print(f"  {arm}'s phases: " + ", ".join(f"{p} {statistics.median(v):.1f}s" for p, v in found.items()))
        for floor in ("bare Spark", "lean Spark"):
            over = statistics.median(firsts["spark engine"]) - statistics.median(firsts[floor])
            print(f"  the engine's own share before the first record: {over:+.1f} s over {floor}")
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
