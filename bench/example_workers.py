"""Throughput of the example `upper` workers, each fed directly over a pipe (no supervisor).

    python bench/example_workers.py [--messages 200000] [--size 100] [--batch 1000]

The baseline is the same work with no protocol at all: ``tr a-z A-Z`` over the same
bytes.  Batch modes get supervisor-driven batches of ``--batch`` messages closed by EOB
(all written ahead, as the supervisor may); single mode gets every message as a request.
A worker-driven run needs a round trip per message, which measures the pipe latency
more than the worker: it runs on a tenth of the messages, like the byte-per-line
``upper_bytes.sh``.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "workers" / "examples"


def make_messages(count: int, size: int) -> list[bytes]:
    body = (b"the quick brown fox jumps over the lazy dog 0123456789 " * (size // 50 + 1))[: size - 8]
    return [b"%07d " % i + body for i in range(count)]


def run_fed(argv: list[str], env: dict[str, str], data: bytes, expect_eops: int) -> float:
    """Seconds to push ``data`` through the worker until ``expect_eops`` EOPs came back."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env)
    assert proc.stdin and proc.stdout

    def feed() -> None:
        proc.stdin.write(data)  # type: ignore[union-attr]
        proc.stdin.close()  # type: ignore[union-attr]

    writer = threading.Thread(target=feed)
    writer.start()
    eops = 0
    while eops < expect_eops:
        chunk = os.read(proc.stdout.fileno(), 1 << 20)
        if not chunk:
            break
        eops += chunk.count(b"\x00")
    writer.join()
    proc.stdout.read()
    proc.wait()
    elapsed = time.perf_counter() - t0
    if eops != expect_eops or proc.returncode != 0:
        raise SystemExit(f"{argv}: got {eops} EOPs of {expect_eops}, exit {proc.returncode}")
    return elapsed


def run_worker_driven(argv: list[str], env: dict[str, str], messages: list[bytes], batch: int) -> float:
    """The real conversation: one message, wait for BNC or the reply, next message."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env)
    assert proc.stdin and proc.stdout
    fd_in, fd_out = proc.stdin.fileno(), proc.stdout.fileno()
    for i, m in enumerate(messages, 1):
        os.write(fd_in, m + b"\n")
        want = b"\x00" if i % batch == 0 else b"\x11"
        got = b""
        while not got.endswith(want):
            got += os.read(fd_out, 1 << 20)
    proc.stdin.close()
    proc.wait()
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=200_000)
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--batch", type=int, default=1000)
    args = ap.parse_args()

    messages = make_messages(args.messages, args.size)
    plain = b"".join(m + b"\n" for m in messages)
    batches = [messages[i : i + args.batch] for i in range(0, len(messages), args.batch)]
    batched = b"".join(b"".join(m + b"\n" for m in b) + b"\x17" for b in batches)
    mb = len(plain) / 1e6

    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(["sh", str(EXAMPLES / "build.sh"), tmp], check=True, capture_output=True)
        workers = {
            "c": [f"{tmp}/upper"],
            "node": ["node", str(EXAMPLES / "upper.js")],
            "python (SDK)": [sys.executable, str(EXAMPLES / "upper.py")],
            "sh/awk": ["sh", str(EXAMPLES / "upper.sh")],
            "sh/od/awk": ["sh", str(EXAMPLES / "upper_bytes.sh")],
        }
        base_env = {**os.environ, "PYTHONPATH": str(ROOT), "ETLSTAGE_TYPE": "T"}

        t0 = time.perf_counter()
        subprocess.run(["tr", "a-z", "A-Z"], input=plain, capture_output=True, check=True)
        baseline = time.perf_counter() - t0
        rows = [("tr a-z A-Z (baseline)", "-", args.messages, baseline)]

        for name, argv in workers.items():
            modes = ["single"] if name == "sh/awk" else ["single", "batch", "batch-worker"]
            if name == "sh/od/awk":
                modes = ["batch-tenth"]  # a byte per line through awk: slow, so a tenth of the data
            for mode in modes:
                env = dict(base_env, ETLSTAGE_MODE="batch" if mode != "single" else "single")
                env["ETLSTAGE_BATCH_SIZE"] = str(args.batch)
                if mode == "single":
                    secs = run_fed(argv, env, plain, len(messages))
                    n = len(messages)
                elif mode == "batch":
                    secs = run_fed(argv, env, batched, len(batches))
                    n = len(messages)
                elif mode == "batch-tenth":
                    few = batches[: max(1, len(batches) // 10)]
                    data = b"".join(b"".join(m + b"\n" for m in b) + b"\x17" for b in few)
                    secs = run_fed(argv, env, data, len(few))
                    n = sum(len(b) for b in few)
                else:
                    env["ETLSTAGE_BATCH_DRIVER"] = "worker"
                    n = max(args.batch, len(messages) // 10 // args.batch * args.batch)
                    secs = run_worker_driven(argv, env, messages[:n], args.batch)
                rows.append((name, mode, n, secs))

    print(f"{args.messages} messages of {args.size} bytes ({mb:.1f} MB), batch size {args.batch}")
    print(f"{'worker':24} {'mode':13} {'messages':>9} {'seconds':>8} {'msg/s':>11} {'MB/s':>7} {'vs tr':>7}")
    base_rate = args.messages / baseline
    for name, mode, n, secs in rows:
        rate = n / secs
        print(
            f"{name:24} {mode:13} {n:9d} {secs:8.2f} {rate:11,.0f} {rate * args.size / 1e6:7.1f} {rate / base_rate:7.2f}"
        )


if __name__ == "__main__":
    main()
