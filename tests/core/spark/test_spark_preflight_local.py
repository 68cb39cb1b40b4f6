"""The pre-flight check of the stages' programs under a ``local`` master runs on the driver,
with no Spark job (a job was about 6 s of every run's start, one with nothing to do
included): its tasks run on this host, in this environment. Elsewhere it stays a job on
every core (tests/core/spark/test_spark_engine_cluster.py, ..._connect.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from etlstage.config.loader import parse_config
from etlstage.spark.driver import probe
from etlstage.spark.driver.config import apply_flags
from etlstage.spark.driver.run import missing_programs
from etlstage.spark.tasks.plan import Plan

PIPELINE = """
stages:
  - {{name: ext, type: E, command: [sh, -c, "true"]}}
  - {{name: tag, type: T, mode: batch, command: [tools/tag.sh]}}
  - {{name: load, type: L, command: [sh, -c, "true"]}}
engine: {{kind: spark, master: "{master}"}}
"""


def _plan(tmp_path: Path, master: str) -> Plan:
    text = PIPELINE.format(master=master)
    config = apply_flags(parse_config(text, str(tmp_path / "stages.yaml"), base_dir=str(tmp_path)), "spark", None)
    return Plan(config, once=True)


def _no_job(*_: object) -> list[str]:
    raise AssertionError("a Spark job was started to look for the programs")


@pytest.mark.parametrize("master", ["local", "local[2]", "local[*]"])
def test_a_local_master_looks_for_every_program_on_the_driver(tmp_path: Path, master: str, monkeypatch) -> None:
    monkeypatch.setattr(probe, "probe_job", _no_job)
    problems = missing_programs(None, _plan(tmp_path, master))  # type: ignore[arg-type]  # no session needed
    assert len(problems) == 1 and problems[0].startswith("stage 'tag': program 'tools/tag.sh' not found"), problems
    (tmp_path / "tools").mkdir()
    (tmp_path / "tools" / "tag.sh").write_text("#!/bin/sh\n")
    (tmp_path / "tools" / "tag.sh").chmod(0o755)
    assert missing_programs(None, _plan(tmp_path, master)) == []  # type: ignore[arg-type]


@pytest.mark.parametrize("master", ["spark://127.0.0.1:7077", "local-cluster[2,1,1024]", "sc://127.0.0.1:15002"])
def test_other_masters_still_look_on_every_core_with_a_job(tmp_path: Path, master: str, monkeypatch) -> None:
    asked: list[list[str]] = []
    monkeypatch.setattr(probe, "probe_job", lambda _spark, _plan, names: asked.append(names) or [])
    assert missing_programs(None, _plan(tmp_path, master)) == []  # type: ignore[arg-type]
    assert asked == [["tag", "load"]]
