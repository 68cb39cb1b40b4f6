"""The supervisor's own instructions (valgrind's callgrind: Ir) for two rows of the core
benchmark, on this code and on other revisions: a count the machine's other load does not
move, where wall times on a shared machine do (docs/performance.md).

    python bench/relay_instructions.py [--n 200000] [--big 2000] [--compare REV ...]

Rows: E (plain, N messages of 100 B) → pass-through T → L, batch 1000 (all SDK workers);
and cat → C loader, batch 16, ``--big`` messages of 64 KiB.  Only the supervisor runs under
callgrind (its workers run natively), so what it counts is the relay's work, start-up and
imports included (1.31·10⁹ of it: the count at 2,000 messages, on the code of 2026-12-02).
Idle time (a wait at start, a settle time) costs no instructions: it shows in wall time only.
"""

from __future__ import annotations

import argparse
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))

from core_pipeline import PY, W, checkout


def instructions(work: Path, env: dict[str, str] | None) -> int:
    """The Ir callgrind counts for ``etlstage run`` of ``work/stages.yaml``."""
    shutil.rmtree(work / ".etlstage", ignore_errors=True)
    out = work / "callgrind.out"
    r = subprocess.run(
        [
            "valgrind",
            "--tool=callgrind",
            f"--callgrind-out-file={out}",
            PY,
            "-m",
            "etlstage.cli",
            "run",
            "stages.yaml",
            "--once",
            "--no-progress",
        ],
        cwd=work,
        capture_output=True,
        text=True,
        env=env,
    )
    if r.returncode != 0:
        raise SystemExit(f"etlstage run under callgrind failed:\n{r.stderr[-3000:]}")
    found = re.search(r"Collected : (\d+)", r.stderr)
    if found is None:
        raise SystemExit(f"no instruction count in callgrind's report:\n{r.stderr[-2000:]}")
    return int(found.group(1))


def small_row(work: Path, n: int) -> None:
    (work / "stages.yaml").write_text(
        textwrap.dedent(f"""
        stages:
          - {{name: gen, type: E, command: ["{PY}", "{W / "gen.py"}", "{n}", --size, "100"]}}
          - {{name: pass, type: T, mode: batch, batch_size: 1000, command: ["{PY}", "{W / "passthru.py"}"]}}
          - {{name: tally, type: L, mode: batch, batch_size: 1000, command: ["{PY}", "{W / "tally.py"}", "{work / "t.txt"}"]}}
    """)
    )


def big_row(work: Path, n: int) -> None:
    loader = work / "null_loader"
    subprocess.run(["cc", "-O2", "-o", str(loader), str(W / "null_loader.c")], check=True)
    (work / "big.bin").write_bytes((b"x" * 65535 + b"\n") * n)
    (work / "stages.yaml").write_text(
        textwrap.dedent(f"""
        buffer_bytes: 64MiB
        stages:
          - {{name: cat, type: E, command: [cat, "{work / "big.bin"}"]}}
          - {{name: discard, type: L, mode: batch, batch_size: 16, command: ["{loader}"]}}
    """)
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=200_000, help="messages of 100 B")
    ap.add_argument("--big", type=int, default=2_000, help="messages of 64 KiB")
    ap.add_argument("--compare", metavar="REV", action="append", default=[])
    a = ap.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))  # stopped (timeout): the worktrees still go
    trees = [(rev, *checkout(rev)) for rev in a.compare]
    envs: list[tuple[str, dict[str, str] | None]] = [("this code", None)] + [(rev, env) for rev, _, env in trees]
    try:
        for name, prepare, n in (("100 B, batch 1000", small_row, a.n), ("64 KiB cat -> C loader", big_row, a.big)):
            work = Path(tempfile.mkdtemp(prefix="etlstage-ir-"))
            prepare(work, n)
            counts = {label: instructions(work, env) for label, env in envs}
            first = counts["this code"]
            print(f"{name}, {n:,} messages: the supervisor's instructions (callgrind Ir)")
            for label, count in counts.items():
                print(f"  {label:<12} {count:>15,}  {count / first:6.3f}x this code's")
            shutil.rmtree(work, ignore_errors=True)
    finally:
        for _, tree, _ in trees:
            subprocess.run(["git", "worktree", "remove", "--force", str(tree)], cwd=HERE.parent, capture_output=True)


if __name__ == "__main__":
    main()
