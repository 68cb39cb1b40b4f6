"""Core benchmark: E (plain, N messages) -> T (pass-through) -> L (counts), all SDK workers.

Measured side by side in one run:
  * baseline: the same three programs chained by a shell pipe, no supervisor;
  * `etlstage run`, batch mode (supervisor-driven, size 1000);
  * `etlstage run`, single-message mode;
  * `etlstage run`, batch mode with 64 KiB messages, cat -> a C loader (GB/s through the supervisor);
  * the supervisor's peak RSS at N and 10 N messages.

    python bench/core_pipeline.py [--n 1000000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from pathlib import Path

import psutil

HERE = Path(__file__).parent
W = HERE / "workers"
PY = sys.executable


def env_for(**markers: str) -> dict[str, str]:
    return {**os.environ, **{f"ETLSTAGE_{k.upper()}": v for k, v in markers.items()}}


def shell_baseline(work: Path, n: int, size: int, batch: int) -> float:
    """gen | passthru (T batch, EOB-closed) | tally (sees T's EOP 0x00 as its EOB)."""
    out = work / "tally-baseline.txt"
    t_env = "ETLSTAGE_TYPE=T ETLSTAGE_MODE=batch"
    l_env = "ETLSTAGE_TYPE=L ETLSTAGE_MODE=batch ETLSTAGE_EOB=00 ETLSTAGE_EOP=01"
    cmd = (
        f"{PY} {W / 'gen.py'} {n} --size {size} --eob-every {batch} | {t_env} {PY} {W / 'passthru.py'} | "
        f"{l_env} {PY} {W / 'tally.py'} {out} > /dev/null"
    )
    t0 = time.perf_counter()
    subprocess.run(["sh", "-c", cmd], check=True)
    elapsed = time.perf_counter() - t0
    assert out.read_text().split()[0] == str(n), out.read_text()
    return elapsed


def supervised(work: Path, n: int, size: int, mode: str, batch: int, cyclic: bool = False) -> tuple[float, int]:
    """Seconds, and the supervisor's peak RSS in bytes."""
    out = work / f"tally-{mode}.txt"
    shutil.rmtree(work / ".etlstage", ignore_errors=True)
    size_key = f"batch_size: {batch}, " if mode == "batch" else ""
    (work / "stages.yaml").write_text(
        textwrap.dedent(f"""
        stages:
          - {{name: gen, type: E, mode: {"cyclic" if cyclic else "plain"},
             command: ["{PY}", "{W / "gen.py"}", "{n}", --size, "{size}", --per-cycle, "{max(1, n // 10)}"]}}
          - {{name: pass, type: T, mode: {mode}, {size_key}command: ["{PY}", "{W / "passthru.py"}"]}}
          - {{name: tally, type: L, mode: {mode}, {size_key}command: ["{PY}", "{W / "tally.py"}", "{out}"]}}
    """)
    )
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        [PY, "-m", "etlstage.cli", "run", "stages.yaml", "--once", "--no-progress"],
        cwd=work,
        stderr=subprocess.PIPE,
        text=True,
    )
    peak = [0]

    def watch() -> None:
        p = psutil.Process(proc.pid)
        while proc.poll() is None:
            try:
                peak[0] = max(peak[0], p.memory_info().rss)
            except psutil.Error:
                return
            time.sleep(0.05)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    _, err = proc.communicate()
    elapsed = time.perf_counter() - t0
    watcher.join()
    if proc.returncode != 0:
        raise SystemExit(f"etlstage run failed:\n{err}")
    assert out.read_text().split()[0] == str(n), out.read_text()
    return elapsed, peak[0]


def big_messages(work: Path, n: int, repeat: int) -> tuple[float, float]:
    """64 KiB messages through the supervisor alone: cat as the E-worker and a C loader
    that only answers EOB with EOP, so neither end limits the rate.
    Returns (shell pipe seconds, supervisor seconds)."""
    loader = work / "null_loader"
    subprocess.run(["cc", "-O2", "-o", str(loader), str(W / "null_loader.c")], check=True)
    message = b"x" * 65535 + b"\n"
    (work / "big.bin").write_bytes(message * n)
    (work / "big-eob.bin").write_bytes((message * 16 + b"\x17") * (n // 16))

    def pipe() -> float:
        t0 = time.perf_counter()
        subprocess.run(["sh", "-c", f"cat {work / 'big-eob.bin'} | {loader} > /dev/null"], check=True)
        return time.perf_counter() - t0

    (work / "stages.yaml").write_text(
        textwrap.dedent(f"""
        buffer_bytes: 64MiB
        stages:
          - {{name: cat, type: E, command: [cat, "{work / "big.bin"}"]}}
          - {{name: discard, type: L, mode: batch, batch_size: 16, command: ["{loader}"]}}
    """)
    )

    def supervised_big() -> float:
        shutil.rmtree(work / ".etlstage", ignore_errors=True)
        t0 = time.perf_counter()
        subprocess.run(
            [PY, "-m", "etlstage.cli", "run", "stages.yaml", "--once", "--no-progress"],
            cwd=work,
            check=True,
            capture_output=True,
        )
        return time.perf_counter() - t0

    return min(pipe() for _ in range(repeat)), min(supervised_big() for _ in range(repeat))


def best(fn, repeat: int):  # type: ignore[no-untyped-def]
    runs = [fn() for _ in range(repeat)]
    return min(runs, key=lambda r: r[0] if isinstance(r, tuple) else r)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--skip-rss", action="store_true")
    a = ap.parse_args()
    n = a.n
    work = Path(tempfile.mkdtemp(prefix="etlstage-bench-"))
    rows = []
    base = best(lambda: shell_baseline(work, n, 100, 1000), a.repeat)
    rows.append(("shell pipe, no supervisor (baseline)", n, base, None))
    batch, rss_n = best(lambda: supervised(work, n, 100, "batch", 1000), a.repeat)
    rows.append(("etlstage run, batch 1000 (supervisor-driven)", n, batch, rss_n))
    cyclic, _ = best(lambda: supervised(work, n, 100, "batch", 1000, cyclic=True), a.repeat)
    rows.append(("etlstage run, batch 1000, cyclic E (10 windows)", n, cyclic, None))
    n_single = max(1, n // 5)
    single, _ = best(lambda: supervised(work, n_single, 100, "single", 1), a.repeat)
    rows.append(("etlstage run, single-message", n_single, single, None))
    n_big = max(16, n // 50 // 16 * 16)
    big_base, big = big_messages(work, n_big, a.repeat)

    print(f"core pipeline, 100-byte messages, best of {a.repeat}; machine: {os.cpu_count()} cores\n")
    print(f"{'run':<48} {'messages':>10} {'seconds':>8} {'msg/s':>12} {'vs baseline':>11}")
    for name, count, secs, _ in rows:
        ratio = f"{secs / (base * count / n):.2f}x" if name != rows[0][0] else "1.00x"
        print(f"{name:<48} {count:>10,} {secs:>8.2f} {count / secs:>12,.0f} {ratio:>11}")
    gb = n_big * 65536 / 1e9
    print(
        f"\n64 KiB messages (cat -> C loader that discards), batch 16: {n_big:,} messages ({gb:.2f} GB): shell pipe {gb / big_base:.2f} GB/s, "
        f"etlstage {gb / big:.2f} GB/s ({big / big_base:.2f}x the pipe's time)"
    )
    if not a.skip_rss:
        _, rss_10n = supervised(work, 10 * n, 100, "batch", 1000)
        print(f"\nsupervisor peak RSS: {rss_n / 1e6:.0f} MB at {n:,} messages, {rss_10n / 1e6:.0f} MB at {10 * n:,}")
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
