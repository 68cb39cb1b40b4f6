"""Spark engine vs supervisor engine: E (plain) -> T (pass-through) -> L (counts), side by side.

The same stages.yaml and the same SDK workers run with ``etlstage run --once`` under
the supervisor and with ``--engine spark --master local[2]``, in one run, for
1,000,000 and 10,000,000 x 100 B and 100,000 x 1 KiB messages (wall time of the whole
command, JVM start included, the Spark query alone, and the steady state).  Then the
micro-batch overhead: a cyclic extractor answering each request with one message, so
every micro-batch is nearly empty; and how many worker processes each stage started.

Steady state: the rate at the sink between 10 % and 95 % of the messages loaded (the
tally worker's time marks), which leaves out the start-up (a JVM and Spark's Python
workers) and the end; for the Spark engine only when the run had at least 4
micro-batches (with fewer it would measure the inside of one batch: "nan").

With ``--connect`` each size also runs through a Spark Connect server (``local[2]``,
started once from the pyspark package before the measurements and warmed by one run):
the same query without a JVM to start per run.

With ``--arm NAME=PYTHONPATH`` each size also runs the Spark engine with the code of another
checkout (PYTHONPATH put in front), right after the engine of this one.

    python bench/spark_engine.py [--repeat 2] [--sizes 1000000x100,10000000x100,100000x1024] [--cycles 40]
                                 [--connect] [--arm NAME=PYTHONPATH ...]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import shutil
import sys
import tempfile
import textwrap
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.timed_run import timed_run

HERE = Path(__file__).parent
W = HERE / "workers"
PIDLOG = HERE.parent / "tests" / "fixtures" / "pidlog.py"
PY = sys.executable


def pipeline(
    work: Path, n: int, size: int, mode: str = "plain", per_cycle: int = 0, instances: int = 1, keys: str = ""
) -> None:
    """The bench's stages.yaml in ``work``; ``keys``: more stage keys for the T and L
    (``replay_bytes: 32MiB``; ``batch_size: 10000`` instead of the bench's 1,000)."""
    more = f" {keys}," if keys else ""
    batch = "" if "batch_size:" in keys else " batch_size: 1000,"  # unless the keys set their own
    # tally writes its totals when its stdin closes; under Spark a stage may have one process
    # per Python worker, so each writes its own file (tally.<pid>) and the bench adds them up
    # ("$$$$": stages.yaml reads "$$" as one literal "$", and the shell's "$$" is its pid).
    tally = f"exec {PY} {W / 'tally.py'} {work}/tally.$$$$ {work}/marks.txt"
    (work / "stages.yaml").write_text(
        textwrap.dedent(f"""
        stages:
          - {{name: gen, type: E, mode: {mode},
             command: ["{PY}", "{W / "gen.py"}", "{n}", --size, "{size}", --per-cycle, "{per_cycle or n}"]}}
          - {{name: pass, type: T, mode: batch,{batch} instances: {instances},{more}
             command: ["{PY}", "{PIDLOG}", "{work}/pass.pids", "{PY}", "{W / "passthru.py"}"]}}
          - {{name: tally, type: L, mode: batch,{batch} instances: {instances},{more}
             command: ["{PY}", "{PIDLOG}", "{work}/tally.pids", sh, -c, "{tally}"]}}
        """)
    )


def run(work: Path, *flags: str, env: dict[str, str] | None = None) -> tuple[float, float | None, str]:
    for p in {*work.glob("tally.*"), *work.glob("*.pids"), *work.glob("marks.txt")}:
        p.unlink()
    shutil.rmtree(work / ".etlstage", ignore_errors=True)
    elapsed, stderr = timed_run(work, list(flags), env)
    m = re.search(r"query ran ([0-9.]+)s", stderr)
    return elapsed, (float(m.group(1)) if m else None), stderr


def loaded(work: Path, n: int) -> int:
    """Messages the tally workers counted (their files appear when their stdin closed)."""
    deadline = time.monotonic() + 20
    total = 0
    while time.monotonic() < deadline:
        total = sum(int(p.read_text().split()[0]) for p in work.glob("tally.[0-9]*") if p.read_text().strip())
        if total >= n:
            break
        time.sleep(0.2)
    return total


def steady_rate(work: Path, n: int, lo: float = 0.10, hi: float = 0.95) -> float:
    """Messages per second at the sink between ``lo`` and ``hi`` of the run's messages loaded
    (the tally workers' time marks, every 10,000 messages): start-up and the end left out."""
    marks = sorted(
        (float(t), int(k)) for line in (work / "marks.txt").read_text().splitlines() for t, k in [line.split()]
    )
    total, t0, c0 = 0, None, 0
    for t, k in marks:
        total += k
        if t0 is None and total >= lo * n:
            t0, c0 = t, total
        if total >= hi * n:
            assert t0 is not None
            return (total - c0) / (t - t0) if t > t0 else float("nan")
    raise SystemExit(f"the sink's marks reach only {total} of {n} messages")


MIN_BATCHES = 4


def micro_batches(stderr: str) -> int:
    return int(re.search(r"micro-batches committed in this run: (\d+)", stderr).group(1))  # type: ignore[union-attr]


def starts(work: Path, stage: str) -> int:
    p = work / f"{stage}.pids"
    return len(p.read_text().splitlines()) if p.exists() else 0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--sizes", default="1000000x100,10000000x100,100000x1024")
    ap.add_argument("--cycles", type=int, default=40, help="nearly empty micro-batches to time (0: none)")
    ap.add_argument("--connect", action="store_true", help="also through a warm Spark Connect server (local[2])")
    ap.add_argument("--arm", action="append", default=[], help="NAME=PYTHONPATH: also the Spark engine with other code")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="etlstage-spark-bench-"))
    spark = ("--engine", "spark", "--master", "local[2]")
    with contextlib.ExitStack() as servers:
        connect = None
        if args.connect:
            sys.path.insert(0, str(HERE.parent))
            from tests.support.spark_cluster import connect_server

            (work / "server").mkdir()
            connect = ("--engine", "spark", "--master", servers.enter_context(connect_server(work / "server")))
            pipeline(work, 1000, 100)
            run(work, *connect)  # its Python processes started once, as on a long-lived server
        measure(args, work, spark, connect)


def measure(args: argparse.Namespace, work: Path, spark: tuple[str, ...], connect: tuple[str, ...] | None) -> None:
    try:
        print(
            f"{'messages':>10} {'size':>6} {'engine':<16} {'wall s':>7} {'query s':>7} {'wall msg/s':>11} "
            f"{'steady msg/s':>12} {'starts T/L':>10}"
        )
        for spec in args.sizes.split(","):
            n, size = (int(x) for x in spec.split("x"))
            pipeline(work, n, size)
            for rep in range(args.repeat):  # the two engines in turn: a change of load falls on both
                sup, _, _ = run(work)
                assert loaded(work, n) == n, "supervisor: tally count"
                sup_steady = steady_rate(work, n)
                print(
                    f"{n:>10,} {size:>6} {'supervisor':<16} {sup:>7.2f} {'':>7} {n / sup:>11,.0f} {sup_steady:>12,.0f}"
                )
                engines = [("spark local[2]", spark, None)] + ([("spark connect", connect, None)] if connect else [])
                for arm in args.arm:  # the same engine, its code from another checkout
                    name, path = arm.split("=", 1)
                    engines.append((name, spark, {**os.environ, "PYTHONPATH": path}))
                for label, flags, env in engines:
                    wall, query, err = run(work, *flags, env=env)
                    got = loaded(work, n)
                    assert got == n, f"{label}: tally counted {got}, expected {n}"
                    batches = micro_batches(err)
                    # a steady state needs a few micro-batches; with fewer, the rate is one batch's inside
                    steady = steady_rate(work, n) if batches >= MIN_BATCHES else float("nan")
                    print(
                        f"{n:>10,} {size:>6} {label:<16} {wall:>7.2f} {query or 0:>7.2f} {n / wall:>11,.0f} "
                        f"{steady:>12,.0f} {starts(work, 'pass'):>4}/{starts(work, 'tally'):<5}"
                        f"  of the supervisor: wall {sup / wall:.0%}, query alone {sup / (query or wall):.0%}, "
                        f"steady {steady / sup_steady:.0%}; {batches} micro-batches (rep {rep + 1})"
                    )
        if args.cycles <= 0:
            return
        # micro-batch overhead: one message per cycle, one cycle per micro-batch
        pipeline(work, args.cycles, 100, mode="cyclic", per_cycle=1)
        wall, query, err = run(work, *spark)
        batches = micro_batches(err)
        spent = query or wall
        print(
            f"micro-batch overhead: {batches} nearly empty micro-batches in {spent:.1f}s "
            f"({batches / spent:.1f}/s, {1000 * spent / batches:.0f} ms each); "
            f"worker starts: pass {starts(work, 'pass')}, tally {starts(work, 'tally')}"
        )
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
