"""The Spark loader's options under the Spark engine, read with the worker's own parser (no JVM)."""

from __future__ import annotations

import logging

import pytest
from etlstage_workers.spark.cli import build_parser, config_from_args
from etlstage_workers.spark.native_sink import parse

from etlstage.config.model import StageConfig
from etlstage.errors import ConfigError
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
