"""Worker SDK throughput: a pass-through transformer on each SDK against a pass-through
loop written by hand in the same language, in one run.

    python bench/sdk_throughput.py --n 500000 --repeat 5

Each worker gets the same input file on stdin (N messages of 100 bytes; in batch mode an
EOB every ``--batch`` messages, supervisor-driven) and its stdout is read through a pipe
and checked byte for byte (every variant must answer exactly as the protocol says). A
worker may read ahead: the supervisor writes requests before the answers come in these
modes. The rows of a language run in turn, best of ``--repeat``, in MB of input per
CPU-second of the worker; "steady state" compares the runs of N and N/20 messages, so
the start-up (loading the SDK) is left out. The programs are in
``bench/sdk_passthrough/`` (Python, Node.js, Go: built first with ``go build``) and, for
Rust and Java, the SDKs' own examples (``cargo build --release``, ``mvn compile``); Java
has a second row, "Java (in place)", for its optional in-place batch API
(``PassthroughInPlace``, a ``BatchTransformer``), beside the same loop by hand. A
language whose toolchain is missing is left out.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
import zlib
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HERE = ROOT / "bench" / "sdk_passthrough"


@dataclass
class Variant:
    language: str
    sdk: list[str]
    hand: list[str]
    label: str = ""  # the row's name, when a language has more than one SDK program

    @property
    def row(self) -> str:
        return self.label or self.language


def variants(bin_dir: Path) -> list[Variant]:
    found = [Variant("Python", [sys.executable, str(HERE / "sdk.py")], [sys.executable, str(HERE / "hand.py")])]
    if shutil.which("node"):
        found.append(Variant("Node.js", ["node", str(HERE / "sdk.js")], ["node", str(HERE / "hand.js")]))
    if shutil.which("go"):
        subprocess.run(["go", "build", "-o", f"{bin_dir}/", "./..."], cwd=HERE / "go", check=True)
        found.append(Variant("Go", [str(bin_dir / "sdk")], [str(bin_dir / "hand")]))
    rust = ROOT / "sdk" / "rust"  # the SDK's own example workers: the pass-through and the loop by hand
    if shutil.which("cargo"):
        subprocess.run(["cargo", "build", "--release", "--examples", "--quiet"], cwd=rust, check=True)
        ex = rust / "target" / "release" / "examples"
        found.append(Variant("Rust", [str(ex / "passthrough")], [str(ex / "passthrough_by_hand")]))
    java = ROOT / "sdk" / "java"
    if shutil.which("mvn") and shutil.which("java"):
        subprocess.run(["mvn", "-q", "-B", "compile"], cwd=java, check=True)
        cp = ["java", "-cp", str(java / "target" / "classes")]
        examples = "org.etlstage.examples"
        hand = [*cp, f"{examples}.PassthroughByHand"]
        found.append(Variant("Java", [*cp, f"{examples}.Passthrough"], hand))
        # the optional in-place API (BatchTransformer): messages read where the SDK read them
        found.append(Variant("Java", [*cp, f"{examples}.PassthroughInPlace"], hand, "Java (in place)"))
    return found


def make_input(n: int, batch: int | None, path: Path) -> tuple[int, int]:
    """Write the input; return (length, crc32) of the answer the protocol requires."""
    rnd = random.Random(7)
    alphabet = b"abcdefghijklmnopqrstuvwxyz0123456789 "
    messages = [bytes(rnd.choices(alphabet, k=100)) for _ in range(1000)]
    crc, size = 0, 0
    with open(path, "wb") as f:
        for start in range(0, n, 1000):
            block = messages[: min(1000, n - start)]
            body = b"".join(m + b"\n" for m in block)
            if batch is None:
                f.write(body)
                answer = b"".join(m + b"\n\x00" for m in block)
            else:
                groups = [block[i : i + batch] for i in range(0, len(block), batch)]
                f.write(b"".join(b"".join(m + b"\n" for m in g) + b"\x17" for g in groups))
                answer = b"".join(b"".join(m + b"\n" for m in g) + b"\x00" for g in groups)
            crc = zlib.crc32(answer, crc)
            size += len(answer)
    return size, crc


def run_once(argv: list[str], env: dict[str, str], input_path: Path) -> tuple[float, float, int, int]:
    """(wall seconds, CPU seconds of the worker, answer length, answer crc32).  CPU time,
    not wall time, is what the table shows: the machine is shared, and a worker waiting
    for the core spends no CPU."""
    with open(input_path, "rb") as stdin:
        start = time.perf_counter()
        proc = subprocess.Popen(argv, stdin=stdin, stdout=subprocess.PIPE, env=env)
        assert proc.stdout is not None
        crc, size = 0, 0
        while chunk := proc.stdout.read1(1 << 20):  # type: ignore[attr-defined]
            crc = zlib.crc32(chunk, crc)
            size += len(chunk)
        _, status, usage = os.wait4(proc.pid, 0)
        elapsed = time.perf_counter() - start
        proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(argv)}: exit {proc.returncode}")
    return elapsed, usage.ru_utime + usage.ru_stime, size, crc


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=500_000, help="messages of 100 bytes")
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--batch", type=int, default=1000, help="batch size of the batch mode rows")
    p.add_argument("--only", action="append", help="only this language (repeatable): Python, Node.js, Go, Rust, Java")
    args = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="sdk-bench-") as tmp:
        tmpdir = Path(tmp)
        all_variants = [v for v in variants(tmpdir / "bin") if not args.only or v.language in args.only]
        print(f"{args.n:,} messages of 100 bytes; CPU time of the worker, best of {args.repeat}\n")
        print("| language | mode | SDK MB/CPU-s | by hand MB/CPU-s | SDK / by hand | steady state |")
        print("|---|---|---:|---:|---:|---:|")
        small_n = max(1, args.n // 20)
        for mode, batch in (("single", None), (f"batch {args.batch}", args.batch)):
            env = {**os.environ, "ETLSTAGE_TYPE": "T", "ETLSTAGE_MODE": "single" if batch is None else "batch"}
            env["ETLSTAGE_BATCH_SIZE"] = str(batch or 1)
            inputs = {}
            for name, n in (("full", args.n), ("small", small_n)):
                path = tmpdir / f"input-{name}"
                inputs[name] = (path, make_input(n, batch, path))
            mb = inputs["full"][0].stat().st_size / 1e6
            mb_small = inputs["small"][0].stat().st_size / 1e6
            for v in all_variants:
                cpu = {(kind, name): float("inf") for kind in ("sdk", "hand") for name in inputs}
                for _ in range(args.repeat):
                    for kind in ("sdk", "hand"):
                        for name, (path, want) in inputs.items():
                            _, used, size, crc = run_once(getattr(v, kind), env, path)
                            if (size, crc) != want:
                                raise SystemExit(f"{v.row} {kind} ({mode}): wrong answer ({size} bytes)")
                            cpu[kind, name] = min(cpu[kind, name], used)
                sdk, hand = mb / cpu["sdk", "full"], mb / cpu["hand", "full"]
                # The messages of the long run beyond the short one: start-up left out.
                steady = {k: (mb - mb_small) / max(1e-9, cpu[k, "full"] - cpu[k, "small"]) for k in ("sdk", "hand")}
                print(
                    f"| {v.row} | {mode} | {sdk:,.0f} | {hand:,.0f} | {100 * sdk / hand:.0f} % "
                    f"| {100 * steady['sdk'] / steady['hand']:.0f} % |",
                    flush=True,
                )
    return 0


if __name__ == "__main__":
    sys.exit(main())
