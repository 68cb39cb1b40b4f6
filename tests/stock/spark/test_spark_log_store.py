"""Delta's DynamoDB log store, an option of the Spark loader on both engines, and the rule
that refuses several instances writing one S3 Delta table without it (no JVM here: the
option's settings, and the refusal, which comes before Spark starts)."""

from __future__ import annotations

from pathlib import Path

import pytest
from etlstage_workers.spark import lake
from etlstage_workers.spark.cli import build_parser, config_from_args
from etlstage_workers.spark.config import LoaderConfig
from etlstage_workers.spark.native_sink import parse

from etlstage import sparkapi
from etlstage.config.model import StageConfig
from etlstage.errors import ConfigError
from etlstage.native import NativeContext
from etlstage.protocol.markers import Markers
from etlstage.protocol.vocabulary import Mode, StageType
from etlstage.spark.setup import jars
from tests.conftest import PY
from tests.support.paths import FIXTURES
from tests.support.run_cli import etlstage

S3 = ["--format", "delta", "--output", "s3a://lake/out", "--columns", "id:long=/id", "--key", "/id"]
LOG_STORE = ["--dynamodb-log-table", "etl_delta_log", "--dynamodb-region", "eu-west-1"]


def worker(*argv: str) -> LoaderConfig:
    return config_from_args(build_parser().parse_args(list(argv)))


def native(*argv: str, instances: int = 1) -> LoaderConfig:
    stage = StageConfig(
        name="load",
        type=StageType.L,
        command=["etlstage-spark-load"],
        mode=Mode.BATCH,
        markers=Markers(),
        instances=instances,
    )
    return parse(NativeContext(stage=stage, argv=list(argv), checkpoint="/ckpt", cwd="/base"))


def test_the_option_gives_delta_the_dynamodb_log_store_for_the_outputs_scheme() -> None:
    config = worker(*S3, *LOG_STORE)
    assert (config.log_table, config.log_table_region) == ("etl_delta_log", "eu-west-1")
    assert config.log_store_conf() == {
        "spark.delta.logStore.s3a.impl": "io.delta.storage.S3DynamoDBLogStore",
        "spark.io.delta.storage.S3DynamoDBLogStore.ddb.tableName": "etl_delta_log",
        "spark.io.delta.storage.S3DynamoDBLogStore.ddb.region": "eu-west-1",
    }
    s3 = worker("--format", "delta", "--output", "s3://lake/out", "--rdss", "--dynamodb-log-table", "t_log")
    assert s3.log_store_conf() == {
        "spark.delta.logStore.s3.impl": "io.delta.storage.S3DynamoDBLogStore",
        "spark.io.delta.storage.S3DynamoDBLogStore.ddb.tableName": "t_log",
    }  # no region given: Delta's default
    assert worker(*S3).log_store_conf() == {}


def test_the_spark_engine_reads_the_option_as_the_worker_does() -> None:
    assert native(*S3, *LOG_STORE) == worker(*S3, *LOG_STORE)


def test_the_session_gets_the_log_store_jars_and_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sparkapi, "fetch_named", lambda name: [Path(f"/cache/{name}.jar")])  # as lake imports it
    config = worker(*S3, *LOG_STORE)
    assert lake.package_sets(config) == ["delta", "s3", "delta-dynamodb"]
    conf = lake.session_conf(config)
    assert conf["spark.jars"] == "/cache/delta.jar,/cache/s3.jar,/cache/delta-dynamodb.jar"
    assert conf["spark.delta.logStore.s3a.impl"] == "io.delta.storage.S3DynamoDBLogStore"
    assert conf["spark.io.delta.storage.S3DynamoDBLogStore.ddb.tableName"] == "etl_delta_log"
    assert lake.package_sets(worker(*S3)) == ["delta", "s3"]
    assert "spark.delta.logStore.s3a.impl" not in lake.session_conf(worker(*S3))


def test_the_jar_set_is_delta_s_log_store_at_delta_s_version_with_the_sdk_it_compiles_against() -> None:
    assert jars.PACKAGES["delta-dynamodb"]() == [
        f"io.delta:delta-storage-s3-dynamodb:{jars.DELTA_VERSION}",
        f"com.amazonaws:aws-java-sdk-dynamodb:{jars.AWS_SDK_V1_VERSION}",
    ]
    assert "delta-dynamodb" not in jars.ALONE  # beside Spark: the jars pyspark ships are not fetched twice


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["--output", "/data/out", "--format", "delta", "--rdss", "--dynamodb-log-table", "t_log"], "/data/out"),
        (["--output", "s3a://lake/x", "--format", "parquet", "--rdss", "--dynamodb-log-table", "t_log"], "parquet"),
        ([*S3, "--dynamodb-log-table", "no"], "3 to 255"),
        ([*S3, "--dynamodb-log-table", "bad name!"], "'bad name!'"),
        ([*S3, "--dynamodb-region", "eu-west-1"], "give the table too"),
        ([*S3, "--dynamodb-log-table", "t_log", "--dynamodb-region", "Ireland"], "'Ireland'"),
    ],
)
def test_a_log_store_where_it_means_nothing_or_a_bad_name_is_refused(argv: list[str], named: str) -> None:
    with pytest.raises(ConfigError, match="--dynamodb") as err:
        worker(*argv)
    assert named in str(err.value)


def test_several_instances_writing_one_s3_delta_table_need_the_log_store() -> None:
    problem = worker(*S3).concurrent_writers_problem(2)
    assert problem is not None
    for said in ("2 instances", "s3a://lake/out", "--dynamodb-log-table", "instances: 1"):
        assert said in problem, said
    assert worker(*S3, *LOG_STORE).concurrent_writers_problem(2) is None
    assert worker(*S3).concurrent_writers_problem(1) is None
    s3 = ["--format", "delta", "--rdss", "--output"]
    assert worker(*s3, "s3://lake/rdss").concurrent_writers_problem(3) is not None
    assert worker(*s3, "S3A://lake/rdss").concurrent_writers_problem(3) is not None
    for safe in ("/data/rdss", "hdfs://nn/rdss", "abfss://c@a.dfs.core.windows.net/rdss"):
        assert worker(*s3, safe).concurrent_writers_problem(3) is None, safe  # put-if-absent there


def test_the_spark_engine_refuses_them_with_the_same_words_naming_the_stage() -> None:
    with pytest.raises(ConfigError) as err:
        native(*S3, instances=2)
    assert "stage 'load' (etlstage-spark-load under the Spark engine)" in str(err.value)
    assert (
        f"stage 'load' (etlstage-spark-load under the Spark engine): {worker(*S3).concurrent_writers_problem(2)}"
        == str(err.value)
    )
    assert native(*S3, *LOG_STORE, instances=2).log_table == "etl_delta_log"
    assert native(*S3, instances=1).output == "s3a://lake/out"


def pipeline(tmp_path: Path) -> None:
    data = tmp_path / "in.jsonl"
    data.write_text("".join(f'{{"id": {i}}}\n' for i in range(10)))
    (tmp_path / "stages.yaml").write_text(
        f"""
stages:
  - {{name: src, type: E, mode: cyclic, command: [{PY}, {FIXTURES / "lines.py"}, {data}, "5"]}}
  - {{name: lake, type: L, mode: batch, instances: 2,
     command: [etlstage-spark-load, --format, delta, --output, "s3a://lake/out", --columns, "id:long=/id",
               --key, /id, --master, "local[1]"]}}
"""
    )


def test_the_supervisor_engine_stops_the_stage_at_start_naming_the_fix(tmp_path: Path) -> None:
    pipeline(tmp_path)
    run = etlstage(tmp_path, "run", "--once", "--no-progress", "stages.yaml", timeout=120)
    assert run.code != 0
    said = run.stderr
    assert "exited before its first request" in said, said[-3000:]
    for words in ("stage 'lake'", "2 instances", "s3a://lake/out", "--dynamodb-log-table"):
        assert words in said, words
    assert "Spark: using" not in said  # refused before a JVM was started


def test_the_spark_engine_refuses_the_run_before_its_session_starts(tmp_path: Path) -> None:
    pipeline(tmp_path)
    run = etlstage(tmp_path, "run", "--engine", "spark", "--once", "--no-progress", "stages.yaml", timeout=120)
    assert run.code == 2, run.stderr[-3000:]
    for words in ("stage 'lake'", "under the Spark engine", "2 instances", "s3a://lake/out", "--dynamodb-log-table"):
        assert words in run.stderr, words
    assert "Spark: using" not in run.stderr  # no JVM
