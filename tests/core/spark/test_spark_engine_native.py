"""Native stages under the Spark engine: an E- or L-stage that runs as Spark itself.

The test's own native source and sink (tests/fixtures/native_stages.py) stand for the
stock ones; a worker process T-stage runs between them, exactly as in the stock pipeline.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from tests.conftest import PY, TW
from tests.core.spark.test_spark_engine_local import run
from tests.support.paths import ROOT
from tests.support.run_cli import Run, etlstage

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]
NATIVE = "tests.fixtures.native_stages"


@pytest.fixture(autouse=True)
def importable_fixtures(monkeypatch: pytest.MonkeyPatch) -> None:
    """Spark's Python workers import the test's native source by name."""
    monkeypatch.setenv("PYTHONPATH", str(ROOT))


def written(out: Path) -> list[str]:
    return [line for f in sorted(out.glob("batch-*.txt")) for line in f.read_text().splitlines()]


def test_native_source_worker_transform_native_sink_exactly(spark, tmp_path: Path) -> None:
    code = run(
        spark,
        tmp_path,
        f"""
stages:
  - {{name: gen, type: E, native: "{NATIVE}:source", command: [gen, --count, "57", --per-batch, "10"]}}
  - {{name: up, type: T, mode: batch, batch_size: 4, instances: 2, command: [{{PY}}, {{TW}}, upper]}}
  - {{name: put, type: L, native: "{NATIVE}:sink", command: [put, --out, got]}}
""",
    )
    assert code == 0
    assert sorted(written(tmp_path / "got")) == sorted(f"M{i}" for i in range(57))
    assert len(list((tmp_path / "got").glob("batch-*.txt"))) >= 6  # 10 per micro-batch


def test_native_source_into_native_sink_passes_messages_bare(spark, tmp_path: Path) -> None:
    """No T-stage: no framing, so a message may hold any byte, a newline included."""
    code = run(
        spark,
        tmp_path,
        f"""
stages:
  - {{name: gen, type: E, native: "{NATIVE}:source", command: [gen, --count, "5", --text, "a\\tb"]}}
  - {{name: put, type: L, native: "{NATIVE}:sink", command: [put, --out, got]}}
""",
    )
    assert code == 0
    assert sorted(written(tmp_path / "got")) == sorted(["a\tb", "m1", "m2", "m3", "m4"])


def test_a_native_message_holding_a_marker_is_a_dead_letter_of_its_consumer(spark, tmp_path: Path) -> None:
    code = run(
        spark,
        tmp_path,
        f"""
stages:
  - {{name: gen, type: E, native: "{NATIVE}:source", command: [gen, --count, "20", --text, "x|y"]}}
  - {{name: up, type: T, markers: {{eom: "|"}}, on_failure: deadletter, command: [{{PY}}, {{TW}}, upper]}}
  - {{name: load, type: L, command: [{{PY}}, {{TW}}, append, out.txt]}}
""",
    )
    assert code == 0
    assert sorted((tmp_path / "out.txt").read_text().splitlines()) == sorted(f"M{i}" for i in range(1, 20))
    from etlstage.state.store import StateStore

    store = StateStore(str(tmp_path / ".etlstage" / "stages"))
    try:
        [letter] = store.deadletters()
    finally:
        store.close()
    assert letter.stage == "up" and "contains its EOM byte 0x7c" in letter.error
    assert b"x|y" in letter.inputs


def test_engine_native_false_runs_every_stage_as_its_worker(spark, tmp_path: Path) -> None:
    """The stage's command runs as a worker process: here a real extractor."""
    code = run(
        spark,
        tmp_path,
        f"""
engine: {{native: false}}
stages:
  - {{name: gen, type: E, native: "{NATIVE}:source", command: [{{PY}}, {{TW}}, count, "7"]}}
  - {{name: load, type: L, command: [{{PY}}, {{TW}}, append, out.txt]}}
""",
    )
    assert code == 0
    assert len((tmp_path / "out.txt").read_text().splitlines()) == 7


def _cli(tmp: Path, stages: str) -> Run:
    (tmp / "stages.yaml").write_text(stages.replace("{PY}", PY).replace("{TW}", TW))
    return etlstage(tmp, "run", "--engine", "spark", "--master", "local[1]", "--once", "--no-progress", "stages.yaml")


def test_a_native_factory_that_cannot_be_loaded_is_a_clear_error(tmp_path: Path) -> None:
    r = _cli(
        tmp_path,
        """
stages:
  - {name: gen, type: E, native: "no_such_module_x:source", command: [gen]}
  - {name: load, type: L, command: [{PY}, {TW}, append, out.txt]}
""",
    )
    assert r.code == 2, r.stderr
    assert "stage 'gen': native 'no_such_module_x:source' cannot be loaded" in r.stderr
    assert "Traceback" not in r.stderr


def test_native_on_a_transform_or_beside_another_loader_is_refused(tmp_path: Path) -> None:
    (tmp_path / "stages.yaml").write_text(
        f"""
stages:
  - {{name: gen, type: E, command: [{PY}, {TW}, count, "3"]}}
  - {{name: up, type: T, native: "{NATIVE}:sink", command: [{PY}, {TW}, upper]}}
  - {{name: load, type: L, command: [{PY}, {TW}, append, out.txt]}}
"""
    )
    r = etlstage(tmp_path, "validate", "stages.yaml")
    assert r.code == 2 and "only E- and L-stages have native Spark implementations" in r.stderr
    r = _cli(
        tmp_path,
        f"""
stages:
  - {{name: gen, type: E, command: [{{PY}}, {{TW}}, count, "3"]}}
  - {{name: put, type: L, native: "{NATIVE}:sink", command: [put, --out, got]}}
  - {{name: load, type: L, command: [{{PY}}, {{TW}}, append, out.txt]}}
""",
    )
    assert r.code == 2, r.stderr
    assert "stage 'put' runs as a native Spark sink, which must be the pipeline's only L-stage" in r.stderr


def test_the_documented_native_sink_runs_as_written(spark, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """docs/writing-workers.md's example (tests/fixtures/native_lines.py), its worker-only option given."""
    with caplog.at_level(logging.INFO, "etlstage.native"):
        code = run(
            spark,
            tmp_path,
            f"""
stages:
  - {{name: gen, type: E, native: "{NATIVE}:source", command: [gen, --count, "25", --per-batch, "10"]}}
  - {{name: put, type: L, native: "tests.fixtures.native_lines:sink",
     command: [lines-load, --out, got, --state-dir, /nonexistent/state]}}
""",
        )
    assert code == 0
    assert sorted(written(tmp_path / "got")) == sorted(f"m{i}" for i in range(25))
    said = [r.getMessage() for r in caplog.records if "ignored under the Spark engine" in r.getMessage()]
    assert said == ["stage 'put' (lines-load under the Spark engine): ignored under the Spark engine: "
                    "--state-dir (the query's checkpoint keeps the place)"]  # fmt: skip
