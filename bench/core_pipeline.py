"""Core benchmark: E (plain, N messages) -> T (pass-through) -> L (counts), all SDK workers.

Measured side by side in one run:
  * baseline: the same three programs chained by a shell pipe, no supervisor;
  * relay floor: the same three programs, one Python process copying every byte between
    them (bench/workers/relay_floor.py: no protocol), the least any relay that sees the
    bytes costs;
  * `etlstage run`, batch mode (supervisor-driven, size 1000);
  * `etlstage run`, worker-driven batches (BNC) of 256 and 1000, beside supervisor-driven
    ones of the same sizes;
  * `etlstage run`, single-message mode;
  * 64 KiB messages through the pass-through T (batches of 16), against its own shell pipe;
  * `etlstage run`, batch mode with 64 KiB messages, cat -> a C loader (GB/s through the supervisor);
  * the supervisor's peak RSS at N and 10 N messages, and with default settings
    (batch_size 1000) for messages of 100 B, 64 KiB and 1 MiB (1 GiB each for the big ones).

    python bench/core_pipeline.py [--n 1000000] [--repeat 3] [--compare REV] [--http] [--drivers-only]

--drivers-only runs just the batch drivers side by side: supervisor- and worker-driven
batches of 256 and 1000, and single-message mode, all at N messages (with the baseline).
With --sdk, the T-worker is each SDK's pass-through in turn (Python, Node.js, Go, Rust,
Java; the E and L stay Python): the worker-driven ratio per language.

--compare REV runs every supervised row a second time on the code of git revision REV
(a temporary worktree, imported through PYTHONPATH), in the same run: before and after.
Given more than once, each REV gets its rows.
--http adds the row with the status server on (etlstage run --http 127.0.0.1:PORT), scraped
while it runs: /metrics and /api/status, each every second.  --http-only runs just that
A/B, off and on alternately, and prints the ratio of their best times.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
import urllib.request
from collections.abc import Callable
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
    cmd = " | ".join(pipe_stages(out, n, size, batch)) + " > /dev/null"
    t0 = time.perf_counter()
    subprocess.run(["sh", "-c", cmd], check=True)
    elapsed = time.perf_counter() - t0
    assert out.read_text().split()[0] == str(n), out.read_text()
    return elapsed


def pipe_stages(out: Path, n: int, size: int, batch: int) -> list[str]:
    """The baseline's three shell commands: E with an EOB every ``batch``, T, and an L that
    reads the T's EOPs as its EOBs."""
    t_env = "ETLSTAGE_TYPE=T ETLSTAGE_MODE=batch"
    l_env = "ETLSTAGE_TYPE=L ETLSTAGE_MODE=batch ETLSTAGE_EOB=00 ETLSTAGE_EOP=01"
    return [
        f"{PY} {W / 'gen.py'} {n} --size {size} --eob-every {batch}",
        f"{t_env} {PY} {W / 'passthru.py'}",
        f"{l_env} {PY} {W / 'tally.py'} {out} > /dev/null",
    ]


def relay_floor(work: Path, n: int, size: int, batch: int) -> float:
    """The baseline's programs with one Python process copying every byte between them
    (bench/workers/relay_floor.py: no parsing, no counting): the floor of a relay."""
    out = work / "tally-relay.txt"
    t0 = time.perf_counter()
    subprocess.run([PY, str(W / "relay_floor.py"), *pipe_stages(out, n, size, batch)], check=True)
    elapsed = time.perf_counter() - t0
    assert out.read_text().split()[0] == str(n), out.read_text()
    return elapsed


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def scrape(done: threading.Event, url: str) -> None:
    """What watching costs: /metrics and /api/status, each once a second, while the run lasts."""
    while not done.is_set():
        for path in ("metrics", "api/status"):
            try:
                with urllib.request.urlopen(url + path, timeout=5) as r:
                    r.read()
            except OSError:
                pass  # not listening yet, or the run just ended
            time.sleep(0.5)


def supervised(
    work: Path,
    n: int,
    size: int,
    mode: str,
    batch: int,
    cyclic: bool = False,
    env: dict[str, str] | None = None,
    extra: tuple[str, ...] = (),
    cpu: list[float] | None = None,
    per_cycle: int | None = None,
    driver: str = "supervisor",
    transform: list[str] | None = None,
) -> tuple[float, int]:
    """Seconds, and the supervisor's peak RSS in bytes.  ``cpu`` gets the CPU seconds (user +
    system) of the supervisor and its workers: a figure the machine's other load barely moves.
    Cyclic: ``per_cycle`` messages a window (default n/10); ``transform``: the T's command
    (default the Python pass-through)."""
    out = work / f"tally-{mode}.txt"
    shutil.rmtree(work / ".etlstage", ignore_errors=True)
    size_key = f"batch_size: {batch}, batch_driver: {driver}, " if mode == "batch" else ""
    (work / "stages.yaml").write_text(
        textwrap.dedent(f"""
        stages:
          - {{name: gen, type: E, mode: {"cyclic" if cyclic else "plain"},
             command: ["{PY}", "{W / "gen.py"}", "{n}", --size, "{size}", --per-cycle, "{per_cycle or max(1, n // 10)}"]}}
          - {{name: pass, type: T, mode: {mode}, {size_key}command: {json.dumps(transform or [PY, str(W / "passthru.py")])}}}
          - {{name: tally, type: L, mode: {mode}, {size_key}command: ["{PY}", "{W / "tally.py"}", "{out}"]}}
    """)
    )
    http = ()
    if "--http" in extra:
        http = ("--http", f"127.0.0.1:{free_port()}")
        extra = tuple(x for x in extra if x != "--http")
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        [PY, "-m", "etlstage.cli", "run", "stages.yaml", "--once", "--no-progress", *http, *extra],
        cwd=work,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    done = threading.Event()  # set once the supervisor is reaped (here, by wait4 alone)
    if http:
        threading.Thread(target=scrape, args=(done, f"http://{http[1]}/"), daemon=True).start()
    peak = [0]

    def watch() -> None:
        p = psutil.Process(proc.pid)
        while not done.is_set():
            try:
                peak[0] = max(peak[0], p.memory_info().rss)
            except psutil.Error:
                return
            time.sleep(0.05)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    assert proc.stderr is not None
    err = proc.stderr.read()
    _, status, usage = os.wait4(proc.pid, 0)  # its rusage counts the workers it reaped
    elapsed = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    done.set()
    if cpu is not None:
        cpu.append(usage.ru_utime + usage.ru_stime)
    watcher.join()
    if proc.returncode != 0:
        raise SystemExit(f"etlstage run failed:\n{err}")
    assert out.read_text().split()[0] == str(n), out.read_text()
    return elapsed, peak[0]


def big_messages(work: Path, n: int) -> tuple[Callable[[], float], Callable[[dict[str, str] | None], float]]:
    """64 KiB messages through the supervisor alone: cat as the E-worker and a C loader
    that only answers EOB with EOP, so neither end limits the rate.
    Returns the shell pipe's run and the supervisor's (given the environment to run it in),
    each returning its seconds."""
    loader = work / "null_loader"
    subprocess.run(["cc", "-O2", "-o", str(loader), str(W / "null_loader.c")], check=True)
    message = b"x" * 65535 + b"\n"
    (work / "big.bin").write_bytes(message * n)
    (work / "big-eob.bin").write_bytes((message * 16 + b"\x17") * (n // 16))
    big = work / "big"
    big.mkdir(exist_ok=True)
    (big / "stages.yaml").write_text(
        textwrap.dedent(f"""
        buffer_bytes: 64MiB
        stages:
          - {{name: cat, type: E, command: [cat, "{work / "big.bin"}"]}}
          - {{name: discard, type: L, mode: batch, batch_size: 16, command: ["{loader}"]}}
    """)
    )

    def pipe() -> float:
        t0 = time.perf_counter()
        subprocess.run(["sh", "-c", f"cat {work / 'big-eob.bin'} | {loader} > /dev/null"], check=True)
        return time.perf_counter() - t0

    def supervised_big(env: dict[str, str] | None) -> float:
        shutil.rmtree(big / ".etlstage", ignore_errors=True)
        t0 = time.perf_counter()
        subprocess.run(
            [PY, "-m", "etlstage.cli", "run", "stages.yaml", "--once", "--no-progress"],
            cwd=big,
            check=True,
            capture_output=True,
            env=env,
        )
        return time.perf_counter() - t0

    return pipe, supervised_big


def interleaved(runs: dict[str, Callable[[], float | tuple[float, int]]], repeat: int) -> dict[str, tuple[float, int]]:
    """Each run once per round, in turn; the best (shortest) of ``repeat`` rounds, as
    (seconds, peak RSS or 0)."""
    results: dict[str, list[tuple[float, int]]] = {k: [] for k in runs}
    for _ in range(repeat):
        for name, fn in runs.items():
            r = fn()
            results[name].append(r if isinstance(r, tuple) else (r, 0))
    return {k: min(v) for k, v in results.items()}


def checkout(rev: str) -> tuple[Path, dict[str, str]]:
    """A worktree of ``rev`` and the environment that makes etlstage import from it."""
    path = Path(tempfile.mkdtemp(prefix="etlstage-rev-"))
    subprocess.run(
        ["git", "worktree", "add", "--detach", str(path), rev], cwd=HERE.parent, check=True, capture_output=True
    )
    compiled(path)
    return path, {**os.environ, "PYTHONPATH": str(path)}


def compiled(tree: Path) -> None:
    """Byte-compile ``tree``'s packages, so no arm compiles its modules at each start (with
    PYTHONDONTWRITEBYTECODE set, a fresh worktree would, every run: an unfair A/B)."""
    subprocess.run(
        [PY, "-m", "compileall", "-q", "-j", "0", str(tree / "etlstage"), str(tree / "workers"), str(tree / "bench")],
        check=True,
        capture_output=True,
    )


def http_ab(work: Path, n: int, repeat: int) -> None:
    """Batch 1000 with the HTTP endpoints off and on (scraped), alternately, ``repeat`` times each."""
    off, on, cpu_off, cpu_on = [], [], [], []  # type: ignore[var-annotated]
    for _ in range(repeat):
        off.append(supervised(work, n, 100, "batch", 1000, cpu=cpu_off)[0])
        on.append(supervised(work, n, 100, "batch", 1000, extra=("--http",), cpu=cpu_on)[0])
    print(f"core pipeline, batch 1000, {n:,} messages of 100 B, off/on alternately x{repeat}; {os.cpu_count()} cores")
    for name, runs, cpus in (("--http off", off, cpu_off), ("--http on, scraped every second", on, cpu_on)):
        print(
            f"  {name:<34} wall best {min(runs):6.3f} s median {statistics.median(runs):6.3f} s; "
            f"CPU median {statistics.median(cpus):6.3f} s; wall runs {runs_text(runs)}"
        )
    print(
        f"  on / off: wall best {min(on) / min(off):.3f}x, median {statistics.median(on) / statistics.median(off):.3f}x; "
        f"CPU median {statistics.median(cpu_on) / statistics.median(cpu_off):.3f}x"
    )


DRIVERS = ("supervisor", "worker")


def drivers(
    work: Path,
    n: int,
    repeat: int,
    envs: list[tuple[str, dict[str, str] | None]],
    transforms: list[tuple[str, list[str] | None]],
) -> None:
    """Supervisor- and worker-driven batches of 256 and 1000, and single-message mode, in
    turn each round (best of ``repeat``), with the shell pipe as the baseline; once per
    environment (``--compare``) and per T-worker (``--sdk``: each SDK's pass-through)."""
    runs: dict[str, Callable[[], float | tuple[float, int]]] = {
        "base": lambda: shell_baseline(work, n, 100, 1000),
        "relay": lambda: relay_floor(work, n, 100, 1000),
    }
    cpu: dict[str, list[float]] = {}
    arms = [(f"{t_tag}{e_tag}", env, t) for e_tag, env in envs for t_tag, t in transforms]
    for tag, env, t in arms:
        for size in (256, 1000):
            for driver in DRIVERS:
                key = f"{driver} {size}{tag}"
                runs[key] = lambda env=env, size=size, driver=driver, key=key, t=t: supervised(
                    work, n, 100, "batch", size, env=env, driver=driver, cpu=cpu.setdefault(key, []), transform=t
                )
        key = f"single{tag}"
        runs[key] = lambda env=env, key=key, t=t: supervised(
            work, n, 100, "single", 1, env=env, cpu=cpu.setdefault(key, []), transform=t
        )
    got = interleaved(runs, repeat)
    base = got["base"][0]
    width = max(50, *(len(f"etlstage run, batch 1000, supervisor-driven{tag}") for tag, _, _ in arms))
    print(f"batch drivers, {n:,} messages of 100 B, best of {repeat}; machine: {os.cpu_count()} cores\n")
    print(
        f"{'run':<{width}} {'seconds':>8} {'msg/s':>10} {'vs baseline':>11} {'vs sup.-driven':>14} {'CPU s':>6} {'CPU vs':>7}"
    )
    print(f"{'shell pipe, no supervisor (baseline)':<{width}} {base:>8.2f} {n / base:>10,.0f} {1:>10.2f}x")
    for tag, _, _ in arms:
        rows = [
            (f"batch {z}, {d}-driven", f"{d} {z}{tag}", f"supervisor {z}{tag}") for z in (256, 1000) for d in DRIVERS
        ]
        for what, key, ref in [*rows, ("single-message", f"single{tag}", f"supervisor 1000{tag}")]:
            secs, ref_secs = got[key][0], got[ref][0]
            name = f"etlstage run, {what}{tag}"
            print(
                f"{name:<{width}} {secs:>8.2f} {n / secs:>10,.0f} {secs / base:>10.2f}x {ref_secs / secs:>13.2f}x "
                f"{min(cpu[key]):>6.2f} {min(cpu[ref]) / min(cpu[key]):>6.2f}x"
            )
    print(
        "\nvs sup.-driven: the supervisor-driven row's time over this row's (a throughput ratio; single-message:\n"
        "against batch 1000); CPU s: the best CPU seconds of the supervisor and its workers, CPU vs: the same ratio"
    )


def sdk_transforms(work: Path) -> list[tuple[str, list[str] | None]]:
    """Each SDK's pass-through T (bench/sdk_passthrough, the Rust and Java SDKs' examples),
    built first; a language whose toolchain is missing is left out."""
    sys.path.insert(0, str(HERE))
    from sdk_throughput import variants

    bin_dir = work / "sdk-bin"
    bin_dir.mkdir(exist_ok=True)
    return [(f" [{v.row}]", v.sdk) for v in variants(bin_dir)]


def runs_text(runs: list[float]) -> str:
    return " ".join(f"{r:.2f}" for r in runs)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--skip-rss", action="store_true")
    ap.add_argument(
        "--compare",
        metavar="REV",
        action="append",
        default=[],
        help="also run every supervised row on REV (repeatable)",
    )
    ap.add_argument("--http", action="store_true", help="add the row with etlstage run --http 127.0.0.1:0")
    ap.add_argument("--http-only", action="store_true", help="only batch 1000 with --http off and on, alternately")
    ap.add_argument("--drivers-only", action="store_true", help="only supervisor- against worker-driven batches")
    ap.add_argument("--sdk", action="store_true", help="with --drivers-only: the T of each SDK in turn")
    ap.add_argument(
        "--relay-only",
        action="store_true",
        help="only the baseline and the batch 1000 rows (plain and cyclic E): the relay at sustained load",
    )
    ap.add_argument(
        "--worker-driven-here-only",
        action="store_true",
        help="the worker-driven row on this code only, not on --compare revisions (before write-ahead: minutes a run)",
    )
    a = ap.parse_args()
    n = a.n
    work = Path(tempfile.mkdtemp(prefix="etlstage-bench-"))
    if a.http_only:
        http_ab(work, n, a.repeat)
        shutil.rmtree(work, ignore_errors=True)
        return
    compiled(HERE.parent)
    old = [(rev, *checkout(rev)) for rev in a.compare]
    envs: list[tuple[str, dict[str, str] | None]] = [("", None)] + [(f" [{rev}]", env) for rev, _, env in old]
    if a.drivers_only:
        drivers(work, n, a.repeat, envs, sdk_transforms(work) if a.sdk else [("", None)])
        shutil.rmtree(work, ignore_errors=True)
        remove_worktrees(old)
        return
    rows = []  # (name, messages, seconds, baseline seconds for that many messages)
    # Every row of a group runs once per round, in turn, so a change in the machine's load
    # falls on all of them alike (best of --repeat rounds).
    runs: dict[str, Callable[[], float | tuple[float, int]]] = {
        "base": lambda: shell_baseline(work, n, 100, 1000),
        "relay": lambda: relay_floor(work, n, 100, 1000),
    }
    for tag, env in envs:
        runs[f"batch{tag}"] = lambda env=env: supervised(work, n, 100, "batch", 1000, env=env)
        runs[f"cyclic{tag}"] = lambda env=env: supervised(work, n, 100, "batch", 1000, cyclic=True, env=env)
        if not a.relay_only and not (tag and a.worker_driven_here_only):
            runs[f"worker{tag}"] = lambda env=env: supervised(work, n, 100, "batch", 1000, env=env, driver="worker")
    if a.http:
        runs["http"] = lambda: supervised(work, n, 100, "batch", 1000, extra=("--http",))
    got = interleaved(runs, a.repeat)
    base = got["base"][0]
    rss_n = got["batch"][1]
    rows.append(("shell pipe, no supervisor (baseline)", n, base, base))
    rows.append(("relay floor: one Python process copying (no protocol)", n, got["relay"][0], base))
    for tag, _ in envs:
        rows.append((f"etlstage run, batch 1000{tag}", n, got[f"batch{tag}"][0], base))
    if a.http:
        rows.append(("etlstage run, batch 1000, --http on, scraped", n, got["http"][0], base))
    for tag, _ in envs:
        if f"worker{tag}" in got:
            rows.append((f"etlstage run, batch 1000, worker-driven (BNC){tag}", n, got[f"worker{tag}"][0], base))
    for tag, _ in envs:
        rows.append((f"etlstage run, batch 1000, cyclic E (10 windows){tag}", n, got[f"cyclic{tag}"][0], base))
    if a.relay_only:
        print_rows(a.repeat, rows)
        shutil.rmtree(work, ignore_errors=True)
        remove_worktrees(old)
        return
    n_single = max(1, n // 5)
    runs = {"base": lambda: shell_baseline(work, n_single, 100, 1000)}
    for tag, env in envs:
        runs[f"single{tag}"] = lambda env=env: supervised(work, n_single, 100, "single", 1, env=env)
    got = interleaved(runs, a.repeat)
    for tag, _ in envs:
        rows.append((f"etlstage run, single-message{tag}", n_single, got[f"single{tag}"][0], got["base"][0]))
    n64 = max(16, n // 100 // 16 * 16)
    runs = {"base": lambda: shell_baseline(work, n64, 65536, 16)}
    for tag, env in envs:
        runs[f"t64{tag}"] = lambda env=env: supervised(work, n64, 65536, "batch", 16, env=env)
    got = interleaved(runs, a.repeat)
    rows.append(("64 KiB: shell pipe through the T (baseline)", n64, got["base"][0], got["base"][0]))
    for tag, _ in envs:
        rows.append((f"64 KiB: etlstage run, batch 16{tag}", n64, got[f"t64{tag}"][0], got["base"][0]))

    print_rows(a.repeat, rows)
    n_big = max(16, n // 50 // 16 * 16)
    gb = n_big * 65536 / 1e9
    pipe, supervised_big = big_messages(work, n_big)
    runs = {"base": pipe}
    for tag, env in envs:
        runs[f"big{tag}"] = lambda env=env: supervised_big(env)
    got = interleaved(runs, a.repeat)
    big_base = got["base"][0]
    print(f"\n64 KiB messages (cat -> C loader that discards), batch 16: {n_big:,} messages ({gb:.2f} GB):")
    print(f"  shell pipe {gb / big_base:.2f} GB/s")
    for tag, _ in envs:
        big = got[f"big{tag}"][0]
        print(f"  etlstage{tag} {gb / big:.2f} GB/s ({big / big_base:.2f}x the pipe's time)")
    if not a.skip_rss:
        _, rss_10n = supervised(work, 10 * n, 100, "batch", 1000)
        print(f"\nsupervisor peak RSS: {rss_n / 1e6:.0f} MB at {n:,} messages, {rss_10n / 1e6:.0f} MB at {10 * n:,}")
        print("supervisor peak RSS with default settings, batch_size 1000 (E -> pass-through T -> L):")
        for size, count in ((100, n), (65536, 16384), (1 << 20, 1024)):
            for tag, env in envs:
                secs, rss = supervised(work, count, size - 1, "batch", 1000, env=env)
                print(f"  {size:>8,} B x {count:>9,}{tag:<12} {rss / 1e6:>6.0f} MB  ({secs:.1f} s)")
    shutil.rmtree(work, ignore_errors=True)
    remove_worktrees(old)


def print_rows(repeat: int, rows: list[tuple[str, int, float, float]]) -> None:
    print(f"core pipeline, best of {repeat}; machine: {os.cpu_count()} cores\n")
    print(f"{'run':<56} {'messages':>10} {'seconds':>8} {'msg/s':>12} {'vs baseline':>11}")
    for name, count, secs, ref in rows:
        print(f"{name:<56} {count:>10,} {secs:>8.2f} {count / secs:>12,.0f} {secs / ref:>10.2f}x")


def remove_worktrees(old: list[tuple[str, Path, dict[str, str]]]) -> None:
    for _, tree, _ in old:
        subprocess.run(["git", "worktree", "remove", "--force", str(tree)], cwd=HERE.parent, capture_output=True)


if __name__ == "__main__":
    main()
