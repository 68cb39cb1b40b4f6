"""Throughput of a pass-through transformer through the Rust and Java worker SDKs,
against the same pass-through written by hand in the same language, in one run.

    python bench/sdk_rust_java.py [--messages 5000000] [--size 100] [--batch 1000] [--runs 5]

Each worker reads its whole input from a file (all requests written ahead, as the
supervisor may) and writes to a file (in /dev/shm where there is one), so nothing but
the worker is measured; its output is checked (EOP count, and the same bytes from both
versions).  The measure is the worker's CPU time (user + system, every thread), not the
wall clock: on a shared machine the wall clock mostly measures the other jobs.  Single mode answers
every message with EOP; batch mode gets supervisor-driven batches of ``--batch``
messages closed by EOB.  Runs alternate SDK and hand-written; the median run counts.
A whole run includes the process start and, in Java, the JIT's warm-up; the steady
state (what a long-running worker sees) is the cost of the messages a run of
``--messages`` has beyond a run of a fifth of them.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import statistics
import subprocess
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RUST = ROOT / "sdk" / "rust"
JAVA = ROOT / "sdk" / "java"


def build() -> dict[str, dict[str, list[str]]]:
    """The commands of each language's two workers, built once."""
    subprocess.run(["cargo", "build", "--release", "--examples", "--quiet"], cwd=RUST, check=True)
    subprocess.run(["mvn", "-q", "-B", "compile"], cwd=JAVA, check=True)
    ex = RUST / "target" / "release" / "examples"
    java = ["java", "-cp", str(JAVA / "target" / "classes")]
    return {
        "rust": {"sdk": [str(ex / "passthrough")], "by hand": [str(ex / "passthrough_by_hand")]},
        "java": {
            "sdk": [*java, "org.etlstage.examples.Passthrough"],
            "by hand": [*java, "org.etlstage.examples.PassthroughByHand"],
        },
    }


def make_input(path: Path, count: int, size: int, batch: int | None) -> int:
    """Write the requests; return the number of EOPs they ask for."""
    body = (b"the quick brown fox jumps over the lazy dog 0123456789 " * (size // 50 + 1))[: size - 8]
    with path.open("wb") as f:
        if batch is None:
            f.write(b"".join(b"%07d %s\n" % (i, body) for i in range(count)))
            return count
        eops = 0
        for first in range(0, count, batch):
            f.write(b"".join(b"%07d %s\n" % (i, body) for i in range(first, min(first + batch, count))) + b"\x17")
            eops += 1
        return eops


def run_once(argv: list[str], env: dict[str, str], data: Path, out: Path, eops: int) -> tuple[float, str]:
    """The worker's CPU seconds (user + system, all its threads) and a digest of its output."""
    with data.open("rb") as stdin, out.open("wb") as stdout:
        proc = subprocess.Popen(argv, stdin=stdin, stdout=stdout, env=env)
        _, status, usage = os.wait4(proc.pid, 0)
    code = os.waitstatus_to_exitcode(status)
    result = out.read_bytes()
    got = result.count(b"\x00")
    if code != 0 or got != eops:
        raise SystemExit(f"{argv}: exit {code}, {got} EOPs of {eops}")
    return usage.ru_utime + usage.ru_stime, hashlib.sha256(result).hexdigest()


def measure(argv: list[str], env: dict[str, str], inputs: list[tuple[Path, int]], out: Path) -> list[float]:
    """CPU seconds of one run on each input."""
    return [run_once(argv, env, data, out, eops)[0] for data, eops in inputs]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=5_000_000)
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--batch", type=int, default=1000)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--lang", choices=["rust", "java"], action="append", help="default: both")
    args = ap.parse_args()
    workers = build()
    small = max(args.batch, args.messages // 5 // args.batch * args.batch)
    print(
        f"{args.messages:,} messages of {args.size} bytes, median of {args.runs} runs, in messages per CPU-second;"
        f" steady state: the extra {args.messages - small:,} messages over a run of {small:,}"
    )
    print(f"{'language':8}  {'mode':15}  {'run':>5}  {'SDK':>12}  {'by hand':>12}  SDK / by hand")
    shm = "/dev/shm" if os.path.isdir("/dev/shm") else None
    with tempfile.TemporaryDirectory(dir=shm) as tmp:
        big, little, out = Path(tmp) / "big", Path(tmp) / "small", Path(tmp) / "out"
        for mode, batch in (("single", None), (f"batch of {args.batch}", args.batch)):
            inputs = [(big, make_input(big, args.messages, args.size, batch))]
            inputs.append((little, make_input(little, small, args.size, batch)))
            env = {
                **os.environ,
                "ETLSTAGE_TYPE": "T",
                "ETLSTAGE_MODE": "single" if batch is None else "batch",
                "ETLSTAGE_BATCH_SIZE": str(batch or 1),
            }
            for lang in args.lang or ["rust", "java"]:
                digests = {run_once(workers[lang][v], env, big, out, inputs[0][1])[1] for v in ("sdk", "by hand")}
                if len(digests) != 1:
                    raise SystemExit(f"{lang} {mode}: the SDK and the hand-written loop wrote different bytes")
                cpu: dict[str, list[list[float]]] = {"sdk": [], "by hand": []}
                for _ in range(args.runs):
                    for variant, runs in cpu.items():
                        runs.append(measure(workers[lang][variant], env, inputs, out))
                whole, steady = {}, {}
                for variant, runs in cpu.items():
                    full = statistics.median(r[0] for r in runs)
                    part = statistics.median(r[1] for r in runs)
                    whole[variant] = args.messages / full
                    steady[variant] = (args.messages - small) / max(full - part, 1e-9)
                for label, rate in (("whole", whole), ("steady", steady)):
                    print(
                        f"{lang:8}  {mode:15}  {label:>5}  {rate['sdk']:12,.0f}  {rate['by hand']:12,.0f}  "
                        f"{100 * rate['sdk'] / rate['by hand']:.0f} %"
                    )


if __name__ == "__main__":
    main()
