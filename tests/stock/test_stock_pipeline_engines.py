"""The repository's stages.yaml on both engines: the same demo data gives the same tables.

Each test runs a copy of the repository's pipeline file (its own emulator, demo data, state
and output); the valid, invalid and error tables must hold exactly the demo's expected
fates, row for row: the messageIds with their error codes. test_stock_pipeline.py holds the
supervisor to the same fates.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.stock.test_stock_pipeline import ROOT, tables
from tests.support.crash_points import POINTS, kill_at_each_point
from tests.support.run_cli import ETLSTAGE, etlstage

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]
RUN_S = 280


def expected(work: Path) -> dict[str, list[tuple[str, str | None]]]:
    fates = json.loads((work / ".etlstage/demo/expected.json").read_text())["messages"]
    want: dict[str, list[tuple[str, str | None]]] = {"valid": [], "invalid": [], "error": []}
    for message_id, fate in fates.items():
        want[fate["table"]].append((message_id, fate["errorCode"]))
    return {table: sorted(rows) for table, rows in want.items()}


def run_engine(tmp_path: Path, name: str, *flags: str) -> dict[str, list[tuple[str, str | None]]]:
    work = tmp_path / name
    work.mkdir()
    shutil.copy(ROOT / "stages.yaml", work / "stages.yaml")
    r = etlstage(work, "run", *flags, "--once", "--no-progress", "stages.yaml", timeout=RUN_S)
    assert r.code == 0, r.stderr[-4000:]
    got = tables(work / "output/rdss")
    assert got == expected(work), f"{name}: the tables differ from the demo's expected fates"
    # the extractor's report, from the worker or the native source: records read, each shard's lag
    assert re.search(r"^kinesis: records 5,000, lag ms \(shardId-\d+ \d+ shardId-\d+ \d+\)", r.stderr, re.M), r.stderr[
        -3000:
    ]
    return got


def test_the_stock_pipeline_on_spark_then_the_supervisor_then_spark_loads_each_message_once(tmp_path: Path) -> None:
    """Spark from nothing gives exactly the demo's tables (the supervisor's are held to the same
    fates in test_stock_pipeline.py); then one state for both engines: the same pipeline on the
    supervisor and on Spark again go on from the Kinesis extractor's committed positions, so
    every messageId stays once in its table, none missing."""
    shutil.copy(ROOT / "stages.yaml", tmp_path / "stages.yaml")
    spark = ["--engine", "spark", "--master", "local[2]"]
    for flags in (spark, [], spark, spark):
        r = etlstage(tmp_path, "run", *flags, "--once", "--no-progress", "stages.yaml", timeout=RUN_S)
        assert r.code == 0, r.stderr[-4000:]
        got = tables(tmp_path / "output/rdss")
        assert got == expected(tmp_path), f"after {flags or 'the supervisor'}"
        assert all(got.values())  # every table has rows: the demo data exercises all three
    # the last run had nothing new after Spark's last committed micro-batch: no JVM for it
    assert "nothing new to load: stage 'kinesis' has nothing after the last committed micro-batch (asked in" in r.stderr
    assert "start-up: JVM start" not in r.stderr


def test_the_stock_pipeline_on_spark_survives_kills_of_the_driver(tmp_path: Path) -> None:
    """SIGKILL the whole driver (etlstage, its JVM, its services) once at each point of a run
    (in its start-up, in a micro-batch, between two: tests/support/crash_points.py; a seeded
    moment inside a batch), restarting with --once each time: the tables are exactly the demo's."""
    seed = int(os.environ.get("ETLSTAGE_CRASH_SEED", "4111"))
    shutil.copy(ROOT / "stages.yaml", tmp_path / "stages.yaml")
    text = (tmp_path / "stages.yaml").read_text()  # windows of 2,000 records: some 3 micro-batches
    smaller = text.replace('--max-records-per-cycle, "25000"', '--max-records-per-cycle, "2000"')
    assert smaller != text
    (tmp_path / "stages.yaml").write_text(smaller)
    cmd = [*ETLSTAGE, "run", "--engine", "spark", "--master", "local[2]", "--once", "--no-progress", "stages.yaml"]
    with open(tmp_path / "run.log", "ab") as log:
        hit = kill_at_each_point(
            lambda: subprocess.Popen(cmd, cwd=tmp_path, stdout=log, stderr=log, start_new_session=True),
            tmp_path / ".etlstage",
            seed,
        )
        final = subprocess.run(cmd, cwd=tmp_path, stdout=log, stderr=log, timeout=RUN_S)
    assert final.returncode == 0, (tmp_path / "run.log").read_text()[-4000:]
    assert set(hit) == set(POINTS), f"seed {seed}: the kills hit {hit}, not every point of a run"
    assert tables(tmp_path / "output/rdss") == expected(tmp_path), f"seed {seed}: the tables differ (kills at {hit})"


def test_the_stock_pipeline_on_a_standalone_cluster_gives_the_same_tables(tmp_path: Path) -> None:
    """A master and two one-core workers on loopback; the RDSS stage's two partitions spread
    over them; the emulator and the demo data are the driver's services."""
    from tests.support.spark_cluster import standalone_cluster

    work = tmp_path / "work"
    work.mkdir()
    shutil.copy(ROOT / "stages.yaml", work / "stages.yaml")
    (tmp_path / "cluster").mkdir()
    with standalone_cluster(tmp_path / "cluster", workers=2, memory="2g") as master:
        r = etlstage(work, "run", "--engine", "spark", "--master", master, "--once", "--no-progress", "stages.yaml",
                     timeout=RUN_S)  # fmt: skip
    assert r.code == 0, r.stderr[-4000:]
    assert tables(work / "output/rdss") == expected(work)
    apps = [p for p in (tmp_path / "cluster").glob("worker-*/app-*") if p.is_dir()]
    assert len({p.parent.name for p in apps}) == 2, apps  # both workers ran executors


def test_the_stock_pipeline_through_spark_connect_gives_the_same_tables(tmp_path: Path) -> None:
    """A Spark Connect server on loopback runs the query; this process is only its client.
    The emulator's endpoint reaches the server's Python processes in the source's options;
    credentials come from boto3's chain there (the server's environment), never from the client."""
    from etlstage_workers.kinesis.emulator import FAKE_CREDENTIALS

    from tests.support.spark_cluster import connect_server

    (tmp_path / "server").mkdir()
    from etlstage_workers.spark.lake import DELTA_SESSION

    from etlstage.spark.setup.jars import fetch_named

    # The stock pipeline loads Delta tables: a Connect server takes jars and SQL extensions
    # at its start only, from its operator (docs/spark-engine.md)
    delta = {**DELTA_SESSION, "spark.jars": ",".join(str(j) for j in fetch_named("delta"))}
    with connect_server(tmp_path / "server", "local[2]", env=dict(FAKE_CREDENTIALS), conf=delta) as url:
        got = run_engine(tmp_path, "connect", "--engine", "spark", "--master", url)
    assert all(got.values())
