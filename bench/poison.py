"""A poison row: what one failing message costs a pipeline, before and after, in one run.

    python bench/poison.py [--n 20000] [--per-window 5000] [--batch 100] [--repeat 3] [--compare REV]

E (cyclic, N messages in windows of PER_WINDOW) -> T (deterministic Python pass-through
that exits whenever its batch holds the poison message, in the middle of a window) -> L (appends each
message, and each batch's arrival time), ``on_failure: deadletter``. Per arm:

  * wall: the whole run (the poison's back-off, isolation and dead letter included);
  * stall: the longest time the loader went without a batch — the time from the poison
    to the pipeline moving again;
  * duplicates: lines the loader got more than once (a failed T's neighbours handed on again).

``--compare REV`` (default 69e92e0, the code before a T's re-answers were compared with what
it had handed on) runs the same pipeline on REV's code, in turn with this checkout's.
"""

from __future__ import annotations

import argparse
import itertools
import shutil
import subprocess
import tempfile
import textwrap
import time
from pathlib import Path

from core_pipeline import HERE, PY, W, checkout, compiled

T_WORKER = '''
import sys
from etlstage.worker import Transformer, main

class Poisoned(Transformer):
    """Passes messages through; dies (exit 1) on a batch holding the poison, every time."""
    def process(self, messages):
        if any(m == POISON for m in messages):
            sys.exit(1)
        return messages

POISON = sys.argv[1].encode()
main(Poisoned)
'''

L_WORKER = '''
import sys, time
from etlstage.worker import Loader, main

class Append(Loader):
    """Appends each message (at-least-once, as a naive loader does) and each batch's time."""
    def setup(self):
        self.out = open(sys.argv[1], "ab", buffering=0)
        self.times = open(sys.argv[2], "a", buffering=1)
    def load(self, messages):
        self.out.write(b"".join(m + b"\\n" for m in messages))
        self.times.write(f"{time.time()}\\n")

main(Append)
'''


def run_once(work: Path, n: int, per_window: int, batch: int, env: dict[str, str] | None) -> dict[str, float]:
    for name in (".etlstage", "out.txt", "times.txt"):
        target = work / name
        shutil.rmtree(target, ignore_errors=True) if target.is_dir() else target.unlink(missing_ok=True)
    # mid-window: the batches before it in its window are answered and not yet known in step
    poison = b"%010d" % (n // 2 + per_window // 2 + 7) + b"x" * 90
    (work / "stages.yaml").write_text(
        textwrap.dedent(f"""
        stages:
          - {{name: gen, type: E, mode: cyclic,
             command: ["{PY}", "{W / "gen.py"}", "{n}", --size, "100", --per-cycle, "{per_window}"]}}
          - {{name: pass, type: T, mode: batch, batch_size: {batch}, on_failure: deadletter,
             command: ["{PY}", "{work / "t.py"}", "{poison.decode()}"]}}
          - {{name: keep, type: L, mode: batch, batch_size: {batch},
             command: ["{PY}", "{work / "l.py"}", "{work / "out.txt"}", "{work / "times.txt"}"]}}
        """)
    )
    began = time.perf_counter()
    done = subprocess.run(
        [PY, "-m", "etlstage.cli", "run", "stages.yaml", "--once", "--no-progress"],
        cwd=work,
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    wall = time.perf_counter() - began
    if done.returncode != 0:
        raise SystemExit(f"etlstage run failed (exit {done.returncode}):\n{done.stderr[-3000:]}")
    lines = (work / "out.txt").read_bytes().splitlines()
    times = [float(t) for t in (work / "times.txt").read_text().split()]
    stall = max((b - a for a, b in itertools.pairwise(times)), default=0.0)
    missing = n - 1 - len(set(lines) - {poison})  # every message but the poison, once at least
    if missing:
        raise SystemExit(f"{missing} message(s) lost: the benchmark's pipeline is wrong")
    return {"wall": wall, "stall": stall, "duplicates": len(lines) - len(set(lines))}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=20000)
    ap.add_argument("--per-window", type=int, default=5000)
    ap.add_argument("--batch", type=int, default=100)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--compare", default="69e92e0", help="the revision to compare with ('' for none)")
    args = ap.parse_args()

    work = Path(tempfile.mkdtemp(prefix="etlstage-poison-"))
    (work / "t.py").write_text(T_WORKER)
    (work / "l.py").write_text(L_WORKER)
    compiled(HERE.parent)
    arms: dict[str, dict[str, str] | None] = {"this checkout": None}
    trees = []
    if args.compare:
        tree, env = checkout(args.compare)
        trees.append(tree)
        arms[args.compare] = env
    results: dict[str, list[dict[str, float]]] = {a: [] for a in arms}
    try:
        for _ in range(args.repeat):
            for arm, env in arms.items():  # in turn, each round
                results[arm].append(run_once(work, args.n, args.per_window, args.batch, env))
    finally:
        for tree in trees:
            subprocess.run(["git", "worktree", "remove", "--force", str(tree)], cwd=HERE.parent, capture_output=True)
        shutil.rmtree(work, ignore_errors=True)
    print(
        f"{args.n} messages, windows of {args.per_window}, batches of {args.batch}, one poison "
        f"(on_failure: deadletter); best of {args.repeat} (wall, stall), duplicates of each run"
    )
    for arm, runs in results.items():
        wall = min(r["wall"] for r in runs)
        stall = min(r["stall"] for r in runs)
        dups = ", ".join(str(int(r["duplicates"])) for r in runs)
        print(f"  {arm:15} wall {wall:6.2f} s   stall {stall:6.2f} s   duplicates {dups}")


if __name__ == "__main__":
    main()
