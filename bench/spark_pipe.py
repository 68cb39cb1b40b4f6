"""The Spark engine's steady state against what a Spark user would write instead: Spark's
own ``RDD.pipe()`` running the same T program over the same lines on the same master
(issue 59, target 4: at least 0.9x its throughput).

- ``RDD.pipe()``: ``textFile`` of N lines of SIZE bytes, each partition piped through
  ``bench/workers/passthru.py --lines`` (the T's transform over plain lines: pipe has no
  protocol, no windows, no acknowledgements; at-least-once), counted;
- ``RDD.pipe chain``: the same three programs the engine runs, chained by a shell pipe
  inside each partition (E, ``gen.py`` making its share of the N messages with an EOB
  every 1,000 → T ``passthru.py`` → L ``tally.py``, as bench/core_pipeline.py's baseline
  chains them): the same work as the engine's, without its protocol, windows, replay or
  exactly-once; its count is the loaders' own;
- ``spark engine``: ``etlstage run --engine spark --once`` of E (the same N messages) →
  T (``passthru.py``, the same transform through the worker SDK, batches of 1,000) → L (a
  counting loader), as bench/spark_engine.py runs it;
- ``spark engine ×P``: the same with the T and L at ``instances: P`` (P = ``--parts``), so
  the engine runs as many T programs at once as ``RDD.pipe()`` does (with one instance the
  engine's query is one task: one core of two);
- ``supervisor``: the same stages.yaml without Spark (CPU-bound on 2 cores; no target).

Rates: messages per second of the job alone for pipe (its session already started) and of
the query alone for the engine (``query ran`` in its summary: its JVM start left out, its
Python workers' start-up in), and over the whole command for each; and the machine's
CPU-seconds over each whole command (measure on an otherwise quiet machine: on 2 cores a
CPU-bound run's rate is about 2 / its CPU per message). The arms run in turn, ``--repeat`` times, so a
change of load falls on all of them.

    python bench/spark_pipe.py [--n 10000000] [--size 100] [--repeat 2] [--master local[2]] [--by-role]

``--by-role`` prints after each arm where its CPU went, by process role (bench/cpu_roles.py).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.cpu_roles import RoleSampler
from bench.spark_engine import W, loaded, pipeline, run

PY = sys.executable


def write_lines(path: Path, n: int, size: int) -> None:
    """The lines gen.py's messages are (``%010d`` then x's, ``size`` bytes), newline-ended."""
    base = b"x" * (size - 10) + b"\n"
    with open(path, "wb", buffering=1 << 20) as f:
        for start in range(0, n, 4096):
            f.write(b"".join(b"%010d" % i + base for i in range(start, min(n, start + 4096))))


def cpu() -> float:
    """The whole machine's busy CPU-seconds so far (/proc/stat): a run's JVM and Python
    workers are not all waited for by this process, so its own children's rusage misses
    some; on an otherwise quiet machine the difference is the run's."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]  # idle, iowait
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def rdd_pipe(master: str, path: Path, parts: int) -> tuple[float, float, int]:
    """(whole command s, job alone s, lines counted)."""
    t0 = time.perf_counter()
    done = subprocess.run(
        [PY, str(W / "spark_pipe_job.py"), master, str(path), str(parts), PY, str(W / "passthru.py"), "--lines"],
        capture_output=True,
        text=True,
    )
    wall = time.perf_counter() - t0
    if done.returncode != 0:
        raise SystemExit(f"RDD.pipe job failed:\n{done.stderr[-3000:]}")
    m = re.search(r"^job ([0-9.]+) (\d+)$", done.stdout, re.M)
    assert m, done.stdout
    return wall, float(m.group(1)), int(m.group(2))


def rdd_pipe_chain(master: str, n: int, size: int, parts: int, work: Path) -> tuple[float, float, int]:
    """(whole command s, job alone s, messages the loaders counted): E → T → L in each partition."""
    share = n // parts
    t_env = "ETLSTAGE_TYPE=T ETLSTAGE_MODE=batch"
    l_env = "ETLSTAGE_TYPE=L ETLSTAGE_MODE=batch ETLSTAGE_EOB=00 ETLSTAGE_EOP=01"
    tally = f"{work}/chain-$$.txt"  # one per partition's shell
    chain = (
        f"{PY} {W / 'gen.py'} {share} --size {size} --eob-every 1000 </dev/null | {t_env} {PY} {W / 'passthru.py'} | "
        f"{l_env} {PY} {W / 'tally.py'} {tally} >/dev/null && cat {tally}"
    )
    t0 = time.perf_counter()
    done = subprocess.run(
        [PY, str(W / "spark_pipe_job.py"), master, "-", str(parts), "sh", "-c", chain], capture_output=True, text=True
    )
    wall = time.perf_counter() - t0
    if done.returncode != 0:
        raise SystemExit(f"RDD.pipe chain job failed:\n{done.stderr[-3000:]}")
    m = re.search(r"^job ([0-9.]+) (\d+)$", done.stdout, re.M)
    assert m, done.stdout
    return wall, float(m.group(1)), int(m.group(2))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=10_000_000)
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--parts", type=int, default=2, help="RDD.pipe: partitions (programs) of the input")
    ap.add_argument("--no-supervisor", action="store_true")
    ap.add_argument("--by-role", action="store_true", help="each arm's CPU by process role (bench/cpu_roles.py)")
    args = ap.parse_args()

    @contextlib.contextmanager
    def roles(arm: str) -> Iterator[None]:
        if not args.by_role:
            yield
            return
        with RoleSampler(os.getpid(), with_root=False) as sampler:
            yield
        print(sampler.table(arm))

    n = args.n
    with tempfile.TemporaryDirectory(prefix="etlstage-spark-pipe-") as tmp:
        work = Path(tmp)
        lines = work / "lines.txt"
        write_lines(lines, n, args.size)
        pipeline(work, n, args.size)
        spark = ("--engine", "spark", "--master", args.master)
        print(f"{n:,} x {args.size} B, {args.master}: messages per second (seconds)")
        print(f"{'arm':<14} {'whole command':>22} {'job / query alone':>22} {'CPU-s':>7}   vs RDD.pipe (alone)")
        for rep in range(args.repeat):
            c0 = cpu()
            with roles("RDD.pipe"):
                wall, alone, count = rdd_pipe(args.master, lines, args.parts)
            used = cpu() - c0
            assert count == n, f"RDD.pipe counted {count} lines, not {n}"
            pipe_rate = n / alone
            print(f"{'RDD.pipe':<14} {n / wall:>12,.0f} ({wall:6.1f}) {pipe_rate:>12,.0f} ({alone:6.1f}) {used:>7.1f}")
            c0 = cpu()
            with roles("RDD.pipe chain"):
                wall, alone, count = rdd_pipe_chain(args.master, n, args.size, args.parts, work)
            used = cpu() - c0
            assert count == n - n % args.parts, f"RDD.pipe chain: the loaders counted {count}"
            chain_rate = count / alone
            print(
                f"{'RDD.pipe chain':<14} {count / wall:>12,.0f} ({wall:6.1f}) {chain_rate:>12,.0f} ({alone:6.1f}) "
                f"{used:>7.1f}   {chain_rate / pipe_rate:.2f}x"
            )
            for instances in sorted({1, args.parts}):
                arm = "spark engine" if instances == 1 else f"spark engine x{instances}"
                pipeline(work, n, args.size, instances=instances)
                c0 = cpu()
                with roles(arm):
                    wall, query, _ = run(work, *spark)
                used = cpu() - c0
                assert loaded(work, n) == n, f"{arm}: tally count"
                q = query or wall
                print(
                    f"{arm:<14} {n / wall:>12,.0f} ({wall:6.1f}) {n / q:>12,.0f} ({q:6.1f}) {used:>7.1f}   "
                    f"{(n / q) / pipe_rate:.2f}x (rep {rep + 1}); against the chain {(n / q) / chain_rate:.2f}x"
                )
            pipeline(work, n, args.size)
            if not args.no_supervisor:
                c0 = cpu()
                wall, _, _ = run(work)
                used = cpu() - c0
                assert loaded(work, n) == n, "supervisor: tally count"
                print(
                    f"{'supervisor':<14} {n / wall:>12,.0f} ({wall:6.1f}) {'':>22} {used:>7.1f}   "
                    f"{(n / wall) / pipe_rate:.2f}x"
                )


if __name__ == "__main__":
    main()
