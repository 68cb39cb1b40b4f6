"""Shared helpers: write a stages.yaml, run the real `etlstage` CLI on it, read results."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support import jvm_settings
from tests.support.run_cli import Run, etlstage

# Keep the assertion-rewritten test modules in __pycache__ even where the environment sets
# PYTHONDONTWRITEBYTECODE: rewriting all of them again took 6 of a collection's 9 CPU-seconds,
# paid by every test process (each xdist worker, each mutant of bench/mutation.py).
if os.environ.get("ETLSTAGE_TESTS_NO_BYTECODE") != "1":  # bench/mutation.py: mutated sources, never cached
    sys.dont_write_bytecode = False
HERE = Path(__file__).parent
# The JVMs the suite starts: C1 only, the serial GC, and class data archives mapped from the
# suite's own cache, recorded before the tests by `python tests/support/downloads.py` (which
# .ci/run runs) and never by a test (tests/support/jvm_settings.py, docs/testing.md).
# tests/core/spark/test_spark_cds.py sets its own for the runs it is about.
jvm_settings.apply()
# Every test checks its stages.yaml against the schema, whatever an earlier run found valid
# (etlstage/config/verdicts.py): a verdict never depends on the machine's history.
# tests/core/config/test_verdicts.py turns the cache on in folders of its own.
os.environ["ETLSTAGE_CONFIG_CACHE"] = "off"
# longest files first on both processes of `-n 2 --dist worksteal` (its hook runs after -m, -k)
pytest_plugins = ("tests.support.ordering",)
TW = str(HERE / "fixtures" / "tw.py")
PY = sys.executable


class PipelineDir:
    def __init__(self, path: Path) -> None:
        self.path = path

    def write(self, yaml_text: str, name: str = "stages.yaml") -> Path:
        p = self.path / name
        p.write_text(textwrap.dedent(yaml_text).replace("{PY}", PY).replace("{TW}", TW))
        return p

    def etlstage(self, *args: str, timeout: float = 120, env: dict[str, str] | None = None) -> Run:
        return etlstage(self.path, *args, timeout=timeout, env=env)

    def run(self, *args: str, timeout: float = 120) -> Run:
        return self.etlstage("run", "stages.yaml", "--no-progress", *args, timeout=timeout)

    def lines(self, name: str) -> list[str]:
        p = self.path / name
        return p.read_text().splitlines() if p.exists() else []


@pytest.fixture
def pdir(tmp_path: Path) -> PipelineDir:
    return PipelineDir(tmp_path)


@pytest.fixture(scope="session")
def c_build(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The C example workers, built with workers/examples/build.sh into a temporary folder."""
    out = tmp_path_factory.mktemp("c-build")
    subprocess.run(
        ["sh", str(HERE.parent / "workers" / "examples" / "build.sh"), str(out)], check=True, capture_output=True
    )
    return str(out)


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """The one local[2] SparkSession of a test run, set up as the engine sets up its own.

    Every test shares it: a test never stops it (the next test would find it stopped)."""
    from etlstage.spark.driver.run import ENGINE_CONF
    from etlstage.spark.setup.spark_session import quiet_spark, start_session
    from etlstage.spark.setup.worker_python import spark_python

    quiet_spark()
    theirs = os.environ.get("PYSPARK_PYTHON")
    python = spark_python("local[2]", tmp_path_factory.mktemp("spark-state"))
    # a Python process of Spark's that dies reports its Python stack (one crashed once, silently)
    conf = {**ENGINE_CONF, "spark.python.worker.faulthandler.enabled": "true"}
    session = start_session("local[2]", "etlstage-tests", conf, connect_timeout=10, log_level="WARN", python=python)
    if theirs is None:  # the session has read it; the CLI runs that tests start choose their own
        os.environ.pop("PYSPARK_PYTHON", None)
    yield session
    session.stop()


# README's test command runs the fast subset and these: one end-to-end run per engine and per
# stock connector that needs a JVM (`-m "not slow or smoke"`); CI runs the rest after it
# (`-m "slow and not smoke"`). The Kinesis, KCL and RDSS workers' end-to-end tests are fast
# already. A test named here that no longer exists stops collection: a smoke is never lost
# to a rename.
SMOKE = {
    # the Spark engine, in the shared session: E fan-out -> T -> L
    "tests/core/spark/test_spark_engine_local.py::test_plain_extract_fanout_transform_and_load",
    # the stock pipeline on the supervisor: Kinesis emulator -> RDSS -> Spark loader (Delta)
    "tests/stock/test_stock_pipeline.py::test_stock_pipeline_loads_exactly_the_expected_tables",
    # the Kafka extractor and loader against a real broker
    "tests/stock/kafka/test_kafka_engines.py::test_kafka_to_kafka_moves_every_record_once[supervisor]",
}

JVM_FIXTURES = {"spark", "standalone_cluster"}  # each starts a JVM


@pytest.hookimpl(tryfirst=True)  # before -m deselects: it reads the smoke marker set here
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """A test that starts a JVM through a fixture must be marked slow: `-m "not slow"` stays fast."""
    unmarked = [
        item.nodeid
        for item in items
        if JVM_FIXTURES & set(getattr(item, "fixturenames", ())) and item.get_closest_marker("slow") is None
    ]
    if unmarked:
        raise pytest.UsageError("tests that start a JVM must be marked slow: " + ", ".join(unmarked))
    seen = set()
    for item in items:
        if item.nodeid in SMOKE:
            item.add_marker(pytest.mark.smoke)
            seen.add(item.nodeid)
    if SMOKE - seen and _collected_whole_suite(config):
        raise pytest.UsageError("smoke tests not found (renamed?): " + ", ".join(sorted(SMOKE - seen)))


def _collected_whole_suite(config: pytest.Config) -> bool:
    """True when the run names no narrower path or -k than the whole suite."""
    return not config.option.keyword and all(Path(a).resolve() == HERE for a in config.args)
