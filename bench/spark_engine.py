"""Spark engine vs supervisor engine: E (plain) -> T (pass-through) -> L (counts), side by side.

The same stages.yaml and the same SDK workers run with ``etlstage run --once`` under
the supervisor and with ``--engine spark --master local[2]``, in one run, for
1,000,000 x 100 B and 100,000 x 1 KiB messages (wall time of the whole command, JVM
start included, and the Spark query alone).  Then the micro-batch overhead: a cyclic
extractor answering each request with one message, so every micro-batch is nearly
empty; and how many worker processes each stage started.

    python bench/spark_engine.py [--repeat 2] [--sizes 1000000x100,100000x1024] [--cycles 40]
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

HERE = Path(__file__).parent
W = HERE / "workers"
PIDLOG = HERE.parent / "tests" / "fixtures" / "pidlog.py"
PY = sys.executable


def pipeline(work: Path, n: int, size: int, mode: str = "plain", per_cycle: int = 0) -> None:
    # tally writes its totals when its stdin closes; under Spark a stage may have one process
    # per Python worker, so each writes its own file (tally.<pid>) and the bench adds them up.
    tally = f"exec {PY} {W / 'tally.py'} {work}/tally.$$"
    (work / "stages.yaml").write_text(
        textwrap.dedent(f"""
        stages:
          - {{name: gen, type: E, mode: {mode},
             command: ["{PY}", "{W / "gen.py"}", "{n}", --size, "{size}", --per-cycle, "{per_cycle or n}"]}}
          - {{name: pass, type: T, mode: batch, batch_size: 1000,
             command: ["{PY}", "{PIDLOG}", "{work}/pass.pids", "{PY}", "{W / "passthru.py"}"]}}
          - {{name: tally, type: L, mode: batch, batch_size: 1000,
             command: ["{PY}", "{PIDLOG}", "{work}/tally.pids", sh, -c, "{tally}"]}}
        """)
    )


def run(work: Path, *flags: str) -> tuple[float, float | None, str]:
    for p in {*work.glob("tally.*"), *work.glob("*.pids")}:
        p.unlink()
    shutil.rmtree(work / ".etlstage", ignore_errors=True)
    t0 = time.perf_counter()
    proc = subprocess.run(
        [PY, "-m", "etlstage.cli", "run", "stages.yaml", "--once", "--no-progress", *flags],
        cwd=work,
        capture_output=True,
        text=True,
    )
    elapsed = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"etlstage run {' '.join(flags)} failed:\n{proc.stderr[-3000:]}")
    m = re.search(r"query ran ([0-9.]+)s", proc.stderr)
    return elapsed, (float(m.group(1)) if m else None), proc.stderr


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


def starts(work: Path, stage: str) -> int:
    p = work / f"{stage}.pids"
    return len(p.read_text().splitlines()) if p.exists() else 0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--sizes", default="1000000x100,100000x1024")
    ap.add_argument("--cycles", type=int, default=40)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="etlstage-spark-bench-"))
    spark = ("--engine", "spark", "--master", "local[2]")
    try:
        print(
            f"{'messages':>10} {'size':>6} {'engine':<18} {'wall s':>8} {'query s':>8} {'msg/s':>12} {'starts T/L':>10}"
        )
        for spec in args.sizes.split(","):
            n, size = (int(x) for x in spec.split("x"))
            pipeline(work, n, size)
            for rep in range(args.repeat):
                sup, _, _ = run(work)
                assert loaded(work, n) == n, "supervisor: tally count"
                print(f"{n:>10,} {size:>6} {'supervisor':<18} {sup:>8.2f} {'':>8} {n / sup:>12,.0f} {'':>10}")
                wall, query, _ = run(work, *spark)
                got = loaded(work, n)
                assert got == n, f"spark: tally counted {got}, expected {n}"
                rate, qrate = n / wall, n / (query or wall)
                print(
                    f"{n:>10,} {size:>6} {'spark local[2]':<18} {wall:>8.2f} {query or 0:>8.2f} {rate:>12,.0f} "
                    f"{starts(work, 'pass'):>4}/{starts(work, 'tally'):<5}"
                    f"  wall: {rate / (n / sup):.0%} of the supervisor; query alone {qrate:,.0f}/s = "
                    f"{qrate / (n / sup):.0%} (rep {rep + 1})"
                )
        # micro-batch overhead: one message per cycle, one cycle per micro-batch
        pipeline(work, args.cycles, 100, mode="cyclic", per_cycle=1)
        wall, query, err = run(work, *spark)
        batches = int(re.search(r"micro-batches committed in this run: (\d+)", err).group(1))  # type: ignore[union-attr]
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
