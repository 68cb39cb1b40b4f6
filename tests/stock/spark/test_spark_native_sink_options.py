"""The Spark loader's options under the Spark engine, read with the worker's own parser (no JVM)."""

from __future__ import annotations

import logging

import pytest
from etlstage_workers.spark.cli import build_parser, config_from_args
from etlstage_workers.spark.native_sink import parse

from etlstage.config.model import StageConfig
from etlstage.errors import ConfigError, PipelineError
from etlstage.native import NativeContext
from etlstage.protocol.markers import Markers
from etlstage.protocol.vocabulary import Mode, StageType

LOAD = StageConfig(name="load", type=StageType.L, command=["etlstage-spark-load"], mode=Mode.BATCH, markers=Markers())


def ctx(*argv: str) -> NativeContext:
    return NativeContext(stage=LOAD, argv=list(argv), checkpoint="/ckpt", cwd="/base")


def test_the_worker_options_as_the_worker_reads_them_relative_to_its_directory() -> None:
    config = parse(ctx("--output", "out", "--columns", "id:long=/id", "--key", "/id"))
    worker = config_from_args(
        build_parser().parse_args(["--output", "/base/out", "--columns", "id:long=/id", "--key", "/id"])
    )
    assert config == worker


def test_session_options_are_ignored_with_a_log_line_each(caplog: pytest.LogCaptureFixture) -> None:
    plain = parse(ctx("--output", "out", "--rdss"))
    with caplog.at_level(logging.INFO, "etlstage.native"):
        config = parse(
            ctx("--output", "out", "--rdss", "--master", "local[4]", "--conf", "a=b", "--claim-timeout", "5")
        )
    assert config == plain
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 3 and all("stage 'load'" in s for s in said)
    assert [o for o in ("--master", "--conf", "--claim-timeout") if any(o in s for s in said)] == [
        "--master", "--conf", "--claim-timeout"
    ]  # fmt: skip


@pytest.mark.parametrize(("argv", "named"), [(["--output", "o", "--format", "xml"], "xml"), ([], "--output")])
def test_bad_options_name_the_stage(argv: list[str], named: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse(ctx(*argv))
    assert "stage 'load' (etlstage-spark-load under the Spark engine)" in str(err.value) and named in str(err.value)


class _LostBatch:
    """A micro-batch whose gathering on the driver fails as Spark fails it (no JVM)."""

    def __init__(self, error: str) -> None:
        self.error = error

    def toArrow(self) -> None:  # pyspark's name
        raise RuntimeError(self.error)


LOST = (
    "An error occurred while calling o200.getResult.\n: org.apache.spark.SparkException: Job aborted due to "
    "stage failure: Task 1 in stage 1.0 failed 1 times, most recent failure: Lost task 1.0 in stage 1.0 "
    "(TID 3) (192.0.2.2 executor driver): TaskResultLost (result lost from block manager)"
)


@pytest.mark.parametrize("argv", [["--output", "out", "--rdss", "--format", "delta"], ["--output", "out", "--rdss"]])
def test_a_micro_batch_too_large_to_gather_says_so_and_what_to_do(tmp_path, argv: list[str]) -> None:
    """Both sinks (Delta tables, plain files): a micro-batch the driver cannot hold stops the
    run naming the stage, the micro-batch and the fix, in the words the engine shows."""
    from etlstage_workers.spark.native_sink import SinkBatches, TableBatches

    from etlstage.spark.driver.explain import explain

    config = parse(NativeContext(stage=LOAD, argv=argv, checkpoint=str(tmp_path / "ckpt"), cwd=str(tmp_path)))
    sink = (
        TableBatches(config, "load").write
        if config.is_table
        else SinkBatches(config, str(tmp_path / "ckpt" / "sink-log"), "load").write
    )
    with pytest.raises(PipelineError) as raised:
        sink(_LostBatch(LOST), 7)  # type: ignore[arg-type]
    said = str(raised.value)
    assert "stage 'load': micro-batch 7 could not be gathered on the Spark driver" in said
    assert "spark.driver.memory" in said and "--max-records-per-cycle" in said
    # as the engine prints it: the Python error inside Spark's own (a foreachBatch function's)
    spark_text = (
        f"[FOREACH_BATCH_USER_FUNCTION_ERROR] ...\nTraceback ...\netlstage.errors.PipelineError: {said}\n\tat org"
    )
    assert explain(RuntimeError(spark_text)) == said

    with pytest.raises(RuntimeError, match="something else"):  # any other failure is Spark's own, as it was
        sink(_LostBatch("something else"), 8)  # type: ignore[arg-type]
