"""Record the suite's class data archives before the tests start.

The suite maps archives and never records one (tests/support/jvm_settings.py): a test
that happened to be the first of its class path would run slower and wait at exit for its
JVM to write ~150 MB. So the archives are recorded here, once per cache, by the runs whose
class paths most tests share: the Spark engine's driver (also the shared ``spark``
fixture's and the plain loader's class path) and the loader writing Delta. A class path
recorded by none of them (S3A, Kafka's connector) simply runs without an archive.

``python tests/support/downloads.py`` calls :func:`record_suite_archives` after the
downloads; ``.ci/run`` runs it before the tests.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
WAIT = 600.0  # seconds for the runs and their JVMs' archives, on the slowest machine seen


def record_suite_archives() -> str:
    sys.path.insert(0, str(ROOT))
    from etlstage.spark.setup import cds
    from tests.support import jvm_settings
    from tests.support.spark_msgs import env_for, rdss

    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        return "no Java: nothing to record"
    cache = jvm_settings.cds_cache()
    settings = {
        "JAVA_TOOL_OPTIONS": os.environ.get("JAVA_TOOL_OPTIONS", jvm_settings.JAVA_TOOL_OPTIONS),
        "ETLSTAGE_SPARK_CDS": "on",  # this run records; the tests only map
        "ETLSTAGE_CDS_CACHE": str(cache),
    }
    before = set(cache.glob("*.jsa"))
    started = set(cache.glob("*.part.log"))
    deadline = time.monotonic() + WAIT
    with tempfile.TemporaryDirectory() as tmp, tempfile.TemporaryFile() as engine_log:
        work = Path(tmp)
        (work / "stages.yaml").write_text(
            f"""
stages:
  - {{name: ext, type: E, command: [{sys.executable}, {ROOT / "tests/fixtures/tw.py"}, count, "50"]}}
  - {{name: load, type: L, command: [{sys.executable}, {ROOT / "tests/fixtures/tw.py"}, append, out.txt]}}
"""
        )
        engine = subprocess.Popen(
            [sys.executable, "-m", "etlstage.cli", "run", "--engine", "spark", "--master", "local[2]"]
            + ["--once", "--no-progress", "stages.yaml"],
            cwd=work,
            env={**os.environ, **settings},
            stdout=subprocess.DEVNULL,
            stderr=engine_log,  # a file: a pipe nobody reads while the loader runs could fill and stop it
        )
        (work / "state").mkdir()  # as a supervisor makes it
        loader_env = {**env_for(str(work / "state")), **settings}
        loader = subprocess.Popen(
            [sys.executable, "-m", "etlstage_workers.spark", "--rdss", "--format", "delta"]
            + ["--output", str(work / "delta"), "--master", "local[1]"],
            env=loader_env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        try:
            # one batch (EOB), then the end of input: the loader acknowledges and exits
            _, loader_err = loader.communicate(b"".join(rdss(i) + b"\n" for i in range(50)) + b"\x17", timeout=WAIT)
            engine.wait(timeout=max(1.0, deadline - time.monotonic()))
        finally:  # none left running into the tests
            for proc in (engine, loader):
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
            engine_log.seek(0)
            engine_err = engine_log.read()
    if engine.returncode or loader.returncode:
        raise RuntimeError(
            f"recording the suite's class data archives: the engine exited {engine.returncode}, the loader "
            f"{loader.returncode}\n{engine_err.decode(errors='replace')[-1500:]}\n{loader_err.decode(errors='replace')[-1500:]}"
        )
    # the loader does not wait for its JVM to write the archive (a worker's exit is bounded):
    # wait here for every recording these runs started, then take it into use
    while time.monotonic() < deadline:
        cds._take_finished_into_use(cache)
        if not set(cache.glob("*.part.log")) - started:
            break
        time.sleep(1.0)
    recorded = sorted(p.name for p in set(cache.glob("*.jsa")) - before)
    return f"{len(recorded)} recorded, {len(list(cache.glob('*.jsa')))} in {cache}"


if __name__ == "__main__":
    print(record_suite_archives())
