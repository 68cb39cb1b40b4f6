"""The loader against a real standalone cluster on loopback: one master, one worker, from the pyspark package."""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow.dataset as ds
import pytest

from tests.support.spark_cluster import standalone_cluster as standalone_cluster_on
from tests.support.spark_msgs import LoaderProc, env_for, rdss

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]  # a JVM


@pytest.fixture(scope="module")
def standalone_cluster(tmp_path_factory):
    """``spark://127.0.0.1:PORT`` with one 1-core worker."""
    with standalone_cluster_on(tmp_path_factory.mktemp("cluster")) as master_url:
        yield master_url


def test_loader_on_a_standalone_cluster(standalone_cluster, tmp_path) -> None:
    out, state = str(tmp_path / "out"), str(tmp_path / "state")
    args = [
        "--rdss",
        "--output",
        out,
        "--master",
        standalone_cluster,
        "--conf",
        "spark.executor.memory=512m",
        "--conf",
        "spark.cores.max=1",
    ]
    p = LoaderProc(args, env_for(state), str(tmp_path / "loader.stderr"))
    try:
        p.load([rdss(i) for i in range(50)], timeout=240)
        _a_second_application_gets_no_executor(standalone_cluster, tmp_path)
        p.load([rdss(i, "GENERR002" if i % 2 else None) for i in range(40, 90)], timeout=120)
        assert p.close() == 0
    finally:
        p.kill()
    valid = ds.dataset(os.path.join(out, "valid"), format="parquet").to_table().to_pylist()
    invalid = ds.dataset(os.path.join(out, "invalid"), format="parquet").to_table().to_pylist()
    assert sorted(r["position"] for r in valid) == list(range(50)) + list(range(50, 90, 2))
    assert sorted(r["position"] for r in invalid) == list(range(51, 90, 2))
    assert "Spark: using" in (tmp_path / "loader.stderr").read_text()


def _a_second_application_gets_no_executor(master: str, tmp_path: Path) -> None:
    """The worker's one core belongs to the running loader: another loader's start-up probe
    (with its first batch: the loader starts Spark only when it has something to load)
    finds no executor and stops with the cause and the fix (exit 2), loading nothing."""
    stderr = tmp_path / "blocked.stderr"
    args = ["--rdss", "--output", str(tmp_path / "out2"), "--master", master, "--connect-timeout", "0.5"]
    blocked = LoaderProc(args, env_for(str(tmp_path / "state2")), str(stderr))
    try:
        blocked.send([rdss(i) for i in range(3)])
        assert blocked.proc.wait(120) == 2
    finally:
        blocked.kill()
    text = stderr.read_text()
    assert f"the master {master} accepted the application but no executor ran a task within 3s" in text, text[-2000:]
    assert "start a worker (spark-class org.apache.spark.deploy.worker.Worker <master>)" in text
    assert not (tmp_path / "out2").exists() or not any((tmp_path / "out2").rglob("*.parquet"))
    assert "Traceback" not in text
