"""Start-up with and without class data sharing for Spark's driver JVM, side by side.

    python bench/jvm_cds.py [--rounds 5] [--stock]
    python bench/jvm_cds.py --java-options="-XX:TieredStopAtLevel=1" [--rounds 5] [--stock]

Each round runs the same pipeline twice, one run after the other, in a fresh folder:
``ETLSTAGE_SPARK_CDS=off`` (the baseline) and with the archive (recorded once, before the
rounds, into a temporary cache: ``ETLSTAGE_CDS_CACHE``). Rows:
  spark engine   ``etlstage run --engine spark --master local[2] --once``, a plain pipeline
                 (E: 20 numbers, L: append to a file, both Python programs): the whole run,
                 and the start-up phases the run reports (JVM start, session, pre-flight
                 job, query start, first micro-batch)
  stock demo     (--stock) ``etlstage run --once`` of the stock stages.yaml (5,000 RDSS
                 messages into Delta tables, the supervisor engine; the loader's JVM)
With ``--java-options``, both runs of a round use the archive and one also gives the
driver's JVM these options (the engine's ``conf``, the loader's ``--conf``):
``spark.driver.extraJavaOptions``.
Medians over the rounds. Figures: docs/performance-spark.md, "Start-up".
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.timed_run import startup_phases, timed_run

ROOT = Path(__file__).resolve().parents[1]
TW = ROOT / "tests" / "fixtures" / "tw.py"
PLAIN = f"""
stages:
  - {{name: ext, type: E, command: [{sys.executable}, {TW}, count, "20"]}}
  - {{name: load, type: L, command: [{sys.executable}, {TW}, append, out.txt]}}
"""


def run(folder: Path, args: list[str], env: dict[str, str]) -> tuple[float, dict[str, float]]:
    """Seconds of one run in ``folder`` and the start-up phases it reported."""
    seconds, stderr = timed_run(folder, args, env)
    return seconds, startup_phases(stderr)


def fresh(text: str, base: Path, name: str) -> Path:
    folder = Path(tempfile.mkdtemp(prefix=f"{name}-", dir=base))
    (folder / "stages.yaml").write_text(text)
    return folder


def with_java_options(text: str, options: str) -> str:
    """The pipeline with ``options`` for the driver's JVM: the Spark engine's ``conf`` when
    the file has no Spark loader, else (the stock demo) the loader's ``--conf``."""
    setting = f"spark.driver.extraJavaOptions={options}"
    if "etlstage-spark-load" in text:
        return text.replace('--master, "local[*]"]', f'--master, "local[*]", --conf, "{setting}"]')
    return f'engine: {{conf: {{spark.driver.extraJavaOptions: "{options}"}}}}\n{text}'


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--stock", action="store_true", help="also the stock demo (supervisor engine, the loader's JVM)")
    ap.add_argument("--java-options", help="both arms with the archive, one with these driver JVM options")
    a = ap.parse_args()
    base = Path(tempfile.mkdtemp(prefix="bench-cds-"))
    cache = base / "cache"
    on = {**os.environ, "ETLSTAGE_CDS_CACHE": str(cache), "ETLSTAGE_SPARK_CDS": "on"}
    off = {**os.environ, "ETLSTAGE_SPARK_CDS": "off"}
    rows = {"spark engine": (PLAIN, ["--engine", "spark", "--master", "local[2]"])}
    if a.stock:
        rows["stock demo"] = ((ROOT / "stages.yaml").read_text(), [])
    try:
        for name, (text, args) in rows.items():
            # arm label -> (pipeline text, environment)
            arms = {"class data sharing off": (text, off), "class data sharing on": (text, on)}
            if a.java_options:
                arms = {
                    "archive": (text, on),
                    f"archive, {a.java_options}": (with_java_options(text, a.java_options), on),
                }
            for label, (arm_text, env) in arms.items():
                if env is on:  # the JVM options are part of the archive's key: one archive per arm
                    first, _ = run(fresh(arm_text, base, name.replace(" ", "-")), args, on)
                    print(f"{name}, {label}: the run that records the archive took {first:.1f} s", flush=True)
            walls: dict[str, list[float]] = {label: [] for label in arms}
            phases: dict[str, dict[str, list[float]]] = {label: {} for label in arms}
            for _ in range(a.rounds):
                for label, (arm_text, env) in arms.items():
                    seconds, reported = run(fresh(arm_text, base, name.replace(" ", "-")), args, env)
                    walls[label].append(seconds)
                    for phase, v in reported.items():
                        phases[label].setdefault(phase, []).append(v)
            for label in arms:
                steps = ", ".join(f"{p} {statistics.median(v):.1f}s" for p, v in phases[label].items())
                print(
                    f"{name:13} {label}: whole run median {statistics.median(walls[label]):5.1f} s"
                    f" (min {min(walls[label]):.1f}){'; ' + steps if steps else ''}",
                    flush=True,
                )
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
