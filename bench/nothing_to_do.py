"""A `--once` run with nothing new to load: the stock demo's second run, for this checkout
and other code, side by side.

    python bench/nothing_to_do.py --rounds 3 --arm "before=/path/to/old-checkout" [--startup 900] [--engine spark]

Per arm, a fresh folder with the repository's stages.yaml gets one run that loads the
demo's 5,000 messages (not timed), then ``--rounds`` timed runs of
``etlstage run stages.yaml --once``, which find nothing new; the arms take turns.  Each
timed run also says whether Spark started: the Spark loader's ``starting Spark`` /
``Spark: using`` lines at INFO; with ``--engine spark`` (``--master local[2]``), the
engine's start-up phases in its summary.

An arm is a PYTHONPATH put in front of this checkout's installed packages (see
bench/demo_time.py); another checkout without the ``etlstage_workers`` folder gets one
linked to its ``workers`` (this checkout's are the installed ones).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEMO = [sys.executable, "-m", "etlstage.cli", "run", "stages.yaml", "--once", "--no-progress"]
STARTED = ("starting Spark", "Spark: using", "\nstart-up: ")  # the loader's lines; the engine's summary


def run(work: Path, path: str, flags: list[str]) -> tuple[float, str]:
    env = {**os.environ, "PYTHONPATH": path}
    started = time.perf_counter()
    done = subprocess.run([*DEMO, *flags], cwd=work, env=env, capture_output=True, text=True, timeout=1800)
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"exit {done.returncode} in {work}\n{done.stderr[-3000:]}")
    return seconds, done.stderr


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--arm", action="append", default=[], help="NAME=CHECKOUT")
    ap.add_argument("--startup", type=int, default=0, help="the loader's start-up timeout (default the demo's)")
    ap.add_argument("--engine", choices=["supervisor", "spark"], default="supervisor")
    a = ap.parse_args()
    flags = ["--engine", "spark", "--master", "local[2]"] if a.engine == "spark" else []
    arms = {"this checkout": str(ROOT), **dict(x.split("=", 1) for x in a.arm)}
    folders = {}
    for name, path in arms.items():
        workers = Path(path) / "etlstage_workers"
        if Path(path).resolve() != ROOT and not workers.exists() and (Path(path) / "workers").is_dir():
            workers.symlink_to(Path(path) / "workers")
        work = Path(tempfile.mkdtemp(prefix="etlstage-nothing-bench-"))
        text = (ROOT / "stages.yaml").read_text()
        if a.startup:  # a loaded machine: the loader's first batch (its JVM) may need longer
            text = text.replace("{startup: 180,", f"{{startup: {a.startup},")
        (work / "stages.yaml").write_text(text)
        seconds, _ = run(work, path, flags)
        print(f"{name}: first run (loads the demo) {seconds:.1f} s", flush=True)
        folders[name] = work
    times: dict[str, list[float]] = {name: [] for name in arms}
    for r in range(a.rounds):
        for name, path in arms.items():
            seconds, said = run(folders[name], path, flags)
            spark = "started Spark" if any(w in said for w in STARTED) else "no Spark"
            times[name].append(seconds)
            print(f"round {r + 1} {name}: {seconds:.1f} s ({spark})", flush=True)
    for name, seconds in times.items():
        print(f"median of {a.rounds}, {name}: {statistics.median(seconds):.1f} s (min {min(seconds):.1f})")
    for work in folders.values():
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
