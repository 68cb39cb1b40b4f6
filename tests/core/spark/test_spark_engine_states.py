"""The pipeline state gauge under the Spark engine, from real runs on local[2]: running while
the query runs, draining once a graceful stop is asked, failed when the run fails — the
same `etlstage_pipeline_state` as the supervisor's (tests/core/observe/test_instance_metrics.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import PY, TW
from tests.core.observe.test_metrics_export import samples
from tests.support.live_run import LiveRun
from tests.support.run_cli import etlstage
from tests.support.waiting import wait_for

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]
SPARK = ("--engine", "spark", "--master", "local[2]")


def states(text: str) -> dict[str, float]:
    return {dict(ls)["state"]: v for (n, ls), v in samples(text).items() if n == "etlstage_pipeline_state"}


def test_a_spark_run_is_running_then_draining_once_stopped(tmp_path: Path) -> None:
    (tmp_path / "stages.yaml").write_text(
        f"""
name: calm
stages:
  - {{name: src, type: E, mode: cyclic, poll_interval: 0.2, command: ["{PY}", "{TW}", count, "100000000", "50"]}}
  - {{name: sink, type: L, mode: batch, batch_size: 50, command: ["{PY}", "{TW}", append, out.txt]}}
"""
    )
    out = tmp_path / "calm.prom"
    with LiveRun(tmp_path, *SPARK, "--metrics-file", str(out), timeout=120) as run:
        wait_for(lambda: (tmp_path / "out.txt").exists(), 150, "a first micro-batch loaded")
        live = wait_for(lambda: states(run.get("/metrics")[2]) or None, 30, "the state gauge on /metrics")
        assert live == {"running": 1.0, "draining": 0.0, "failed": 0.0}
        assert run.stop() == 0, run.stderr
    assert states(out.read_text()) == {"running": 0.0, "draining": 1.0, "failed": 0.0}


def test_a_failed_spark_run_ends_with_the_failed_state_in_its_metrics(tmp_path: Path) -> None:
    (tmp_path / "stages.yaml").write_text(
        f"""
name: doomed
stages:
  - {{name: src, type: E, command: ["{PY}", "{TW}", count, "10"]}}
  - {{name: sink, type: L, mode: batch, restart: {{max_restarts: 0}}, command: ["{PY}", "-c", "import sys; sys.exit(3)"]}}
"""
    )
    out = tmp_path / "doomed.prom"
    r = etlstage(tmp_path, "run", *SPARK, "--once", "--no-progress", "--metrics-file", str(out), timeout=240)
    assert r.code == 1, r.stderr[-3000:]
    assert states(out.read_text()) == {"running": 0.0, "draining": 0.0, "failed": 1.0}
