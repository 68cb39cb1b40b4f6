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
- ``design floor``: the engine's design with etlstage taken out
  (``bench/workers/spark_design_floor_job.py``): a Python streaming source hands each of
  ``--parts`` tasks a byte range of the same lines, micro-batches of ``--design-batch``
  lines (about the engine's own at 10^7), and a Python Arrow streaming writer's task pipes
  its range through the same T program: what Spark's Python data sources cost against
  ``RDD.pipe()`` before any of etlstage's work;
- ``spark engine``: ``etlstage run --engine spark --once`` of E (the same N messages) →
  T (``passthru.py``, the same transform through the worker SDK, batches of 1,000) → L (a
  counting loader), as bench/spark_engine.py runs it;
- ``spark engine ×P``: the same with the T and L at ``instances: P`` (P = ``--parts``), so
  the engine runs as many T programs at once as ``RDD.pipe()`` does (with one instance the
  engine's query is one task: one core of two);
- ``supervisor``: the same stages.yaml without Spark (CPU-bound on 2 cores; no target).

With ``--marginal`` every arm also runs 2 x N messages, and the rate *between* the two
sizes (N more messages over the extra time of the job or query alone) is the steady
state, with each arm's start-up left out (the JVM, Spark's Python processes, the
engine's first micro-batch, the pipe's first tasks).

Rates: messages per second of the job alone for pipe (its session already started) and of
the query alone for the engine (``query ran`` in its summary: its JVM start left out, its
Python workers' start-up in), and over the whole command for each; and the machine's
CPU-seconds over each whole command (measure on an otherwise quiet machine: on 2 cores a
CPU-bound run's rate is about 2 / its CPU per message). The arms run in turn, ``--repeat`` times, so a
change of load falls on all of them.

    python bench/spark_pipe.py [--n 10000000] [--size 100] [--repeat 2] [--master local[2]] [--by-role]
                               [--marginal] [--arm NAME=PYTHONPATH ...] [--keys NAME=KEYS ...]

``--by-role`` prints after each arm where its CPU went, by process role (bench/cpu_roles.py).
With ``--arm NAME=PYTHONPATH`` the engine arms also run with the code of another checkout
(PYTHONPATH put in front), right after this checkout's, as bench/spark_engine.py does;
with ``--keys NAME=KEYS`` with more stage keys for the T and L (``--keys "32M=replay_bytes: 32MiB"``).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
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


T_LINES = [PY, str(W / "passthru.py"), "--lines"]  # the T over plain lines


def spark_job(what: str, argv: list[str]) -> tuple[float, float, int]:
    """Run a bench job that prints ``job S COUNT``: (whole command s, job alone s, COUNT)."""
    t0 = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if done.returncode != 0:
        raise SystemExit(f"{what} job failed:\n{done.stderr[-3000:]}")
    m = re.search(r"^job ([0-9.]+) (\d+)$", done.stdout, re.M)
    assert m, done.stdout
    return wall, float(m.group(1)), int(m.group(2))


def rdd_pipe(master: str, path: Path, parts: int) -> tuple[float, float, int]:
    """(whole command s, job alone s, lines counted)."""
    return spark_job("RDD.pipe", [PY, str(W / "spark_pipe_job.py"), master, str(path), str(parts), *T_LINES])


def design_floor(master: str, path: Path, parts: int, batch: int) -> tuple[float, float, int]:
    """(whole command s, query alone s, lines counted)."""
    job = [PY, str(W / "spark_design_floor_job.py"), master, str(path), str(parts), str(batch)]
    return spark_job("design floor", [*job, *T_LINES])


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
    return spark_job("RDD.pipe chain", [PY, str(W / "spark_pipe_job.py"), master, "-", str(parts), "sh", "-c", chain])


@dataclasses.dataclass
class Measured:
    wall: float  # the whole command, s
    alone: float  # the job (RDD.pipe) or the query (the engine) alone, s
    used: float  # the machine's busy CPU-s over the command
    count: int  # messages counted at the end

    def line(self, arm: str, rate_against: str = "") -> str:
        return (
            f"{arm:<24} {self.count / self.wall:>12,.0f} ({self.wall:6.1f}) "
            f"{self.count / self.alone:>12,.0f} ({self.alone:6.1f}) {self.used:>7.1f}   {rate_against}"
        )


def marginal(small: Measured, large: Measured) -> float:
    """Messages per second of the job alone between two sizes: what each further message
    costs once the start-up (JVM, Python processes, the first micro-batch's warm-up) is paid."""
    return (large.count - small.count) / max(1e-9, large.alone - small.alone)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=10_000_000)
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--parts", type=int, default=2, help="RDD.pipe: partitions (programs) of the input")
    ap.add_argument("--design-batch", type=int, default=2_500_000, help="design floor: lines a micro-batch")
    ap.add_argument("--no-design-floor", action="store_true")
    ap.add_argument("--no-chain", action="store_true")
    ap.add_argument("--instances", help="the engine arms' T and L instances, e.g. 2 or 1,2 (default: 1 and --parts)")
    ap.add_argument("--no-supervisor", action="store_true")
    ap.add_argument("--by-role", action="store_true", help="each arm's CPU by process role (bench/cpu_roles.py)")
    ap.add_argument(
        "--marginal",
        action="store_true",
        help="each arm also at 2 x N: the rate between the two sizes (the steady state, start-up left out)",
    )
    ap.add_argument("--arm", action="append", default=[], help="NAME=PYTHONPATH: the engine arms with other code too")
    ap.add_argument("--keys", action="append", default=[], help="NAME=KEYS: the engine arms with more T and L keys")
    args = ap.parse_args()
    others = [tuple(a.split("=", 1)) for a in args.arm]
    variants = [tuple(a.split("=", 1)) for a in args.keys]

    @contextlib.contextmanager
    def roles(arm: str) -> Iterator[None]:
        if not args.by_role:
            yield
            return
        with RoleSampler(os.getpid(), with_root=False) as sampler:
            yield
        print(sampler.table(arm))

    sizes = [args.n, 2 * args.n] if args.marginal else [args.n]
    with tempfile.TemporaryDirectory(prefix="etlstage-spark-pipe-") as tmp:
        work = Path(tmp)
        line_files = {}
        for n in sizes:
            line_files[n] = work / f"lines-{n}.txt"
            write_lines(line_files[n], n, args.size)
        spark = ("--engine", "spark", "--master", args.master)

        def pipe(n: int) -> Measured:
            c0 = cpu()
            with roles(f"RDD.pipe {n:,}"):
                wall, alone, count = rdd_pipe(args.master, line_files[n], args.parts)
            assert count == n, f"RDD.pipe counted {count} lines, not {n}"
            return Measured(wall, alone, cpu() - c0, count)

        def floor(n: int) -> Measured:
            c0 = cpu()
            with roles(f"design floor {n:,}"):
                wall, alone, count = design_floor(args.master, line_files[n], args.parts, args.design_batch)
            assert count == n, f"design floor counted {count} lines, not {n}"
            return Measured(wall, alone, cpu() - c0, count)

        def chain(n: int) -> Measured:
            c0 = cpu()
            with roles(f"RDD.pipe chain {n:,}"):
                wall, alone, count = rdd_pipe_chain(args.master, n, args.size, args.parts, work)
            assert count == n - n % args.parts, f"RDD.pipe chain: the loaders counted {count}"
            return Measured(wall, alone, cpu() - c0, count)

        def engine(instances: int, env: dict[str, str] | None = None, keys: str = "") -> Callable[[int], Measured]:
            def measure(n: int) -> Measured:
                pipeline(work, n, args.size, instances=instances, keys=keys)
                c0 = cpu()
                with roles(f"spark engine x{instances} {n:,}"):
                    wall, query, _ = run(work, *spark, env=env)
                assert loaded(work, n) == n, f"spark engine x{instances}: tally count"
                return Measured(wall, query or wall, cpu() - c0, n)

            return measure

        def supervisor(n: int) -> Measured:
            pipeline(work, n, args.size)
            c0 = cpu()
            wall, _, _ = run(work)
            assert loaded(work, n) == n, "supervisor: tally count"
            return Measured(wall, wall, cpu() - c0, n)

        arms: list[tuple[str, Callable[[int], Measured]]] = [("RDD.pipe", pipe)]
        if not args.no_chain:
            arms.append(("RDD.pipe chain", chain))
        if not args.no_design_floor:
            arms.append(("design floor", floor))
        instances = [int(i) for i in args.instances.split(",")] if args.instances else sorted({1, args.parts})
        for i in instances:
            label = "spark engine" if i == 1 else f"spark engine x{i}"
            arms.append((label, engine(i)))
            for name, path in others:
                arms.append((f"{label} {name}", engine(i, {**os.environ, "PYTHONPATH": path})))
            for name, keys in variants:
                arms.append((f"{label} {name}", engine(i, keys=keys)))
        if not args.no_supervisor:
            arms.append(("supervisor", supervisor))
        print(f"{', '.join(f'{n:,}' for n in sizes)} x {args.size} B, {args.master}: messages per second (seconds)")
        print(f"{'arm':<24} {'whole command':>22} {'job / query alone':>22} {'CPU-s':>7}   vs RDD.pipe (alone)")
        for rep in range(args.repeat):
            rates: dict[str, float] = {}  # alone at N
            steady: dict[str, float] = {}  # marginal between N and 2N
            for arm, measure in arms:
                got = [measure(n) for n in sizes]
                rates[arm] = got[0].count / got[0].alone
                against = ""
                if arm != "RDD.pipe":
                    against = f"{rates[arm] / rates['RDD.pipe']:.2f}x"
                    if arm.startswith("spark engine") and "RDD.pipe chain" in rates:
                        against += f"; against the chain {rates[arm] / rates['RDD.pipe chain']:.2f}x"
                print(got[0].line(arm, against + f" (rep {rep + 1})"))
                if args.marginal:
                    steady[arm] = marginal(got[0], got[1])
                    print(got[1].line(arm))
            if args.marginal:
                base = steady["RDD.pipe"]
                print(f"  rep {rep + 1}, between {sizes[0]:,} and {sizes[1]:,} messages (start-up left out):")
                for arm, rate in steady.items():
                    print(f"    {arm:<24} {rate:>12,.0f} msg/s   {rate / base:.2f}x RDD.pipe")


if __name__ == "__main__":
    main()
