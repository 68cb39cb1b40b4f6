"""cli.py runs, shows and taps a pipeline through :class:`etlstage.engines.base.Engine` and
never asks which engine it holds; each engine implements the whole interface; naming the
engines loads neither (``etlstage --help`` imports no pyspark)."""

from __future__ import annotations

import ast
import inspect
import subprocess
import sys
from types import SimpleNamespace
from typing import cast

import pytest

from etlstage.config.model import PipelineConfig
from etlstage.engines import KINDS, engine_for, engine_that_ran
from etlstage.engines.base import Engine
from tests.support.paths import ROOT

ENGINE_NAMES = {"supervisor", "spark"}


def names_compared(source: str) -> list[tuple[int, str]]:
    """(line, name) for every engine's name a comparison in ``source`` holds, on either side
    (``kind == "spark"``, ``"spark" != kind``, ``kind in ("supervisor", "spark")``)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare):
            for operand in [node.left, *node.comparators]:
                for part in ast.walk(operand):
                    if isinstance(part, ast.Constant) and part.value in ENGINE_NAMES:
                        found.append((node.lineno, str(part.value)))
    return found


def test_cli_compares_nothing_with_an_engine_name():
    found = names_compared((ROOT / "etlstage" / "cli.py").read_text(encoding="utf-8"))
    assert not found, "cli.py branches on an engine's name; ask the Engine instead (etlstage/engines/): " + ", ".join(
        f"line {line}: {name!r}" for line, name in found
    )


@pytest.mark.parametrize(
    "branch",
    [
        'if config.engine.kind == "spark": pass',
        'if "supervisor" != engine: pass',
        'x = kind in ("supervisor", "spark")',
        'x = "spark" if a else b if engine.kind == "spark" else c',
    ],
)
def test_the_check_sees_each_way_of_branching(branch):
    assert names_compared(branch)


def test_the_check_lets_an_engine_name_be_said():
    assert not names_compared('engine = engine_for("spark")\nhelp = "supervisor or spark"')


@pytest.mark.parametrize("kind", KINDS)
def test_each_engine_implements_the_interface(kind):
    engine = engine_for(kind)
    assert isinstance(engine, Engine)
    assert engine.kind == kind
    assert isinstance(engine.supports_tap, bool)
    members = [n for n, v in vars(Engine).items() if inspect.isfunction(v) and not n.startswith("_")]
    assert {"prepare", "run", "status", "tap_refusal", "open_tap"} <= set(members)
    for name in members:
        assert inspect.signature(getattr(type(engine), name)) == inspect.signature(getattr(Engine, name)), name


@pytest.mark.parametrize("kind", KINDS)
def test_an_engine_that_cannot_tap_says_why(kind):
    engine = engine_for(kind)
    config = cast(PipelineConfig, SimpleNamespace(name="p"))
    assert bool(engine.tap_refusal(config)) == (not engine.supports_tap)


def test_the_engine_that_ran_wins_over_the_file():
    assert engine_that_ran("spark", "supervisor").kind == "spark"
    assert engine_that_ran("supervisor", "spark").kind == "supervisor"
    assert engine_that_ran("", "spark").kind == "spark"  # never ran
    assert engine_that_ran("deadletter", "spark").kind == "spark"  # the lock's holder is no run


def test_an_unknown_engine_is_named():
    with pytest.raises(ValueError, match="no engine 'flink'"):
        engine_for("flink")


def test_the_cli_and_the_engines_load_no_spark():
    """The CLI's start-up: ``--help`` of every command, and the Spark engine asked for, load
    neither pyspark nor the Spark engine's query."""
    code = (
        "import sys; from click.testing import CliRunner; from etlstage.cli import main; "
        "from etlstage.engines import engine_for; "
        "[CliRunner().invoke(main, [*c, '--help']) for c in ([], ['run'], ['status'], ['tap'])]; "
        "[engine_for(k) for k in ('supervisor', 'spark')]; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('pyspark', 'py4j') "
        "or m.startswith(('etlstage.spark.driver.run', 'etlstage.spark.driver.build', 'etlstage.runtime.runner'))))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
