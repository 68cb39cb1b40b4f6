"""The public native-stage API (etlstage.native): the context and the one way to read a worker's argv."""

from __future__ import annotations

import argparse
import logging
import re
import subprocess
import sys

import pytest

from etlstage.config.model import StageConfig
from etlstage.errors import ConfigError, MarkerError
from etlstage.native import NativeContext, parse_argv
from etlstage.protocol.markers import Markers
from etlstage.protocol.vocabulary import Mode, StageType
from tests.support.paths import ROOT

STAGE = StageConfig(name="put", type=StageType.L, command=["/opt/bin/my-load"], mode=Mode.BATCH, markers=Markers())
WORKER_ONLY = {"state_dir": "--state-dir (the query's checkpoint)", "threads": "--threads (one task per partition)"}


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="my-load")
    p.add_argument("--out", required=True)
    p.add_argument("--format", default="csv", choices=("csv", "json"))
    p.add_argument("--state-dir", default="/var/lib/my-load")
    p.add_argument("--threads", type=int, default=4)
    return p


def ctx(*argv: str) -> NativeContext:
    return NativeContext(stage=STAGE, argv=list(argv), checkpoint="/ckpt", cwd="/base")


def test_the_context_says_what_the_stage_knows() -> None:
    c = ctx("--out", "x")
    assert (c.name, c.program, c.markers) == ("put", "my-load", Markers())
    assert (c.path("rel/dir"), c.path("/abs")) == ("/base/rel/dir", "/abs")
    assert c.spark is None and c.once is False and c.env == {}


def test_arguments_mean_what_they_mean_to_the_worker() -> None:
    ns = parse_argv(ctx("--out", "x", "--format", "json"), parser(), WORKER_ONLY)
    assert vars(ns) == vars(parser().parse_args(["--out", "x", "--format", "json"]))


def test_worker_only_options_are_dropped_with_one_log_line_each(caplog: pytest.LogCaptureFixture) -> None:
    p = parser()
    with caplog.at_level(logging.INFO, "etlstage.native"):
        ns = parse_argv(ctx("--out", "x", "--state-dir", "/tmp/s", "--thr", "9"), p, WORKER_ONLY)
    assert (ns.state_dir, ns.threads) == ("/var/lib/my-load", 4)  # as if not given
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2
    assert all("stage 'put' (my-load under the Spark engine): ignored under the Spark engine" in x for x in lines)
    assert any("--state-dir" in x for x in lines) and any("--threads" in x for x in lines)
    assert vars(p.parse_args(["--out", "y"]))["state_dir"] == "/var/lib/my-load"  # the parser is left as it was


def test_nothing_is_logged_when_no_worker_only_option_is_given(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, "etlstage.native"):
        parse_argv(ctx("--out", "x"), parser(), WORKER_ONLY)
    assert caplog.records == []


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["--out", "x", "--format", "xml"], "xml"),
        (["--out", "x", "--bogus"], "--bogus"),
        (["--out", "x", "--help"], "--help"),
    ],
)
def test_bad_arguments_are_a_config_error_naming_the_stage_and_the_argument(
    argv: list[str], named: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(ConfigError) as err:
        parse_argv(ctx(*argv), parser(), WORKER_ONLY)
    assert "stage 'put'" in str(err.value) and named in str(err.value)
    assert err.value.exit_code == 2
    assert capsys.readouterr().out == ""  # --help's text does not reach the run's output


def test_a_worker_only_name_the_parser_lacks_is_a_programming_error() -> None:
    with pytest.raises(ValueError, match="no option with destination nope"):
        parse_argv(ctx("--out", "x"), parser(), {"nope": "--nope"})


def test_the_api_imports_neither_the_engine_nor_pyspark() -> None:
    code = (
        "import sys, etlstage.native; "
        "bad = sorted(m for m in sys.modules if m.split('.')[0] == 'pyspark' or m.startswith('etlstage.spark')); "
        "print(bad)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_markers_travel_as_one_spark_option_and_back() -> None:
    m = Markers(eom=0x1E, eop=0x01, eob=0x7C, bnc=0xFF)
    assert m.to_option() == "30,1,124,255"
    assert Markers.from_option(m.to_option()) == m
    assert m.named() == {b"\x1e": "EOM", b"\x01": "EOP", b"\x7c": "EOB", b"\xff": "BNC"}
    with pytest.raises(MarkerError, match="markers option"):
        Markers.from_option("10,0,23")
    with pytest.raises(MarkerError, match="markers option"):
        Markers.from_option("10,0,23,x")


def test_the_documented_example_is_the_one_the_engine_runs() -> None:
    """docs/writing-workers.md shows tests/fixtures/native_lines.py as it is (run by a slow test)."""
    doc = (ROOT / "docs" / "writing-workers.md").read_text()
    blocks = [b for b in re.findall(r"```python\n(.*?)```", doc, re.S) if "NativeContext" in b]
    assert blocks == [(ROOT / "tests" / "fixtures" / "native_lines.py").read_text()]
