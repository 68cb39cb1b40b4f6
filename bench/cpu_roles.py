"""Where a command's CPU goes, by the role of each process it starts: the Spark path's
JVM, its driver-side Python, Spark's Python processes (the daemon's task workers, the
streaming source's and writer's runners) and the stage workers, each summed over the run.

The machine-wide figure (/proc/stat) says how much a run costs; this says who spends it.
Every process of the command's tree is sampled (psutil, every ``--every`` seconds) and its
last reading kept, so a process's CPU after its last sample is missed (up to one interval
each; the coverage line compares the sum with the machine's busy CPU over the run, which
on an otherwise quiet machine is the run's).

    python bench/cpu_roles.py [--every 0.1] -- etlstage run stages.yaml --engine spark --once

``bench/spark_pipe.py --by-role`` prints the same table for each of its arms.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

import psutil

# first match wins: (role, words that must all be in the command line)
ROLES: list[tuple[str, tuple[str, ...]]] = [
    ("JVM (Spark)", ("java",)),
    ("JVM (Spark)", ("spark-class",)),  # its launcher script, until it execs the JVM
    ("E worker (gen.py)", ("gen.py",)),
    ("T worker (passthru.py)", ("passthru.py",)),
    ("L worker (tally.py)", ("tally.py",)),
    ("Spark: streaming source runner", ("python_streaming_source_runner",)),
    ("Spark: streaming sink runner", ("python_streaming_sink_runner",)),
    ("Spark: data source set-up", ("pyspark.sql.worker",)),  # lookup, create, plan the read, the writer
    ("Spark: Python task workers", ("pyspark.daemon",)),
    ("Spark: Python task workers", ("pyspark.worker",)),
    ("etlstage: task watchdogs", ("etlstage.spark.tasks.watchdog",)),
    ("etlstage driver / supervisor", ("etlstage",)),
    ("the benchmark's job (driver)", ("spark_pipe_job.py",)),
    ("shell", ("sh",)),
]


def role(cmdline: Sequence[str]) -> str:
    words = " ".join(cmdline)
    base = [os.path.basename(w) for w in cmdline[:1]]
    for name, needles in ROLES:
        if name == "shell":
            if base and base[0] in ("sh", "bash", "dash"):
                return name
            continue
        if all(n in words for n in needles):
            return name
    return "other: " + (base[0] if base else "?")


def busy_cpu() -> float:
    """The machine's busy CPU-seconds so far (/proc/stat)."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return (sum(fields[:8]) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")


class RoleSampler:
    """Samples a process tree's CPU by role until :meth:`stop`."""

    def __init__(self, root: int, every: float = 0.1, *, with_root: bool = True) -> None:
        self.root = root
        self.with_root = with_root  # False: only what it starts (a benchmark sampling its own arms)
        self.every = every
        self.seen: dict[tuple[int, float], tuple[str, float]] = {}  # (pid, create time) → (role, CPU-s)
        self.lines: dict[tuple[int, float], str] = {}  # their command lines, the last seen
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.machine0 = busy_cpu()
        self.machine = 0.0

    def __enter__(self) -> RoleSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        self._thread.join()
        self.machine = busy_cpu() - self.machine0

    def _run(self) -> None:
        while not self._done.is_set():
            self._sample()
            self._done.wait(self.every)
        self._sample()

    def _sample(self) -> None:
        try:
            top = psutil.Process(self.root)
            procs = [top, *top.children(recursive=True)] if self.with_root else top.children(recursive=True)
        except psutil.Error:
            return
        for p in procs:
            try:
                with p.oneshot():
                    key = (p.pid, p.create_time())
                    t = p.cpu_times()
                    used = t.user + t.system
                    line = p.cmdline()
            except psutil.Error:
                continue
            # classified at each sample (a launcher script execs the JVM in its own pid); an
            # exiting process's empty command line keeps the role it had
            name = role(line) if line else self.seen.get(key, ("other: ?", 0.0))[0]
            self.seen[key] = (name, used)
            if line:
                self.lines[key] = " ".join(line)

    def by_role(self) -> Counter[str]:
        out: Counter[str] = Counter()
        for name, used in self.seen.values():
            out[name] += used
        return out

    def processes(self) -> str:
        """Every process, its role, CPU-s and command line: what the roles are made of."""
        rows = sorted(self.seen.items(), key=lambda kv: -kv[1][1])
        return "\n".join(
            f"    {k[0]:>7} {used:6.1f}  {name:<36} {self.lines.get(k, '')[:110]}" for k, (name, used) in rows
        )

    def table(self, title: str) -> str:
        roles = self.by_role()
        total = sum(roles.values())
        lines = [f"  {title}: CPU-s by role (sampled every {self.every} s)"]
        for name, used in roles.most_common():
            lines.append(f"    {name:<40} {used:7.1f}  {used / total:5.1%}" if total else f"    {name}")
        lines.append(
            f"    {'sum of the processes':<40} {total:7.1f}   machine's busy CPU over the run {self.machine:.1f}"
        )
        return "\n".join(lines)


def run_by_role(
    argv: list[str], every: float = 0.1, **popen: object
) -> tuple[subprocess.CompletedProcess[str], RoleSampler]:
    """Run ``argv`` to its end (output captured), its tree's CPU sampled by role."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **popen)  # type: ignore[call-overload]
    with RoleSampler(proc.pid, every) as sampler:
        out, err = proc.communicate()
    done = subprocess.CompletedProcess(argv, proc.returncode, out, err)
    done.elapsed = time.perf_counter() - t0  # type: ignore[attr-defined]
    return done, sampler


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--every", type=float, default=0.1)
    ap.add_argument("--processes", action="store_true", help="list every process too")
    ap.add_argument("command", nargs=argparse.REMAINDER)
    args = ap.parse_args()
    argv = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not argv:
        ap.error("no command given (put it after --)")
    done, sampler = run_by_role(argv, args.every)
    sys.stderr.write(done.stderr[-2000:] if done.returncode else "")
    print(f"exit {done.returncode}, {done.elapsed:.1f} s")  # type: ignore[attr-defined]
    print(sampler.table(" ".join(argv)[:60]))
    if args.processes:
        print(sampler.processes())


if __name__ == "__main__":
    main()
