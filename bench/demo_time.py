"""The stock demo's wall time (``etlstage run stages.yaml --once`` on the embedded
defaults, in a fresh folder each run), for this checkout and other code, in turn.

    python bench/demo_time.py --rounds 3 --arm "old=/path/to/checkout"

An arm is a PYTHONPATH put in front of this checkout's installed packages: a checkout's
root puts its supervisor (``etlstage``) first; a folder holding an ``etlstage_workers``
package puts its workers first (both: join them with ``:``).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--arm", action="append", default=[], help="NAME=PYTHONPATH")
    a = ap.parse_args()
    arms = {"this checkout": str(ROOT), **dict(arm.split("=", 1) for arm in a.arm)}
    for r in range(a.rounds):
        for name, path in arms.items():
            work = Path(tempfile.mkdtemp(prefix="etlstage-demo-bench-"))
            shutil.copy(ROOT / "stages.yaml", work / "stages.yaml")
            env = {**os.environ, "PYTHONPATH": path}
            started = time.perf_counter()
            done = subprocess.run(
                [sys.executable, "-m", "etlstage.cli", "run", "stages.yaml", "--once", "--no-progress"],
                cwd=work, env=env, capture_output=True, text=True,
            )  # fmt: skip
            seconds = time.perf_counter() - started
            if done.returncode != 0:
                raise SystemExit(f"{name}: exit {done.returncode}\n{done.stderr[-3000:]}")
            print(f"round {r + 1} {name}: {seconds:.1f} s", flush=True)
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
