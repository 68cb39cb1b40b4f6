"""The examples in docs/testing.md run as written."""

from __future__ import annotations

import contextlib
import functools
import io
import os
import re
import shlex

import pytest

from etlstage.config.loader import parse_config
from etlstage.errors import ConfigError
from etlstage.testing import StageHarness
from etlstage.testing.pipeline import check_cases
from tests.support.paths import ROOT
from tests.support.run_cli import etlstage

BLOCKS = re.findall(r"```python\n(.*?)```", (ROOT / "docs" / "testing.md").read_text(), re.S)
TESTS = [b for b in BLOCKS if "def test_" in b]


@pytest.mark.parametrize("code", TESTS, ids=[re.search(r"def (test_\w+)", b).group(1) for b in TESTS])
def test_documented_example(code, tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)
    namespace: dict[str, object] = {}
    exec(compile(code, "docs/testing.md", "exec"), namespace)
    fn = next(v for k, v in namespace.items() if k.startswith("test_"))
    kwargs = {
        "stage_harness": StageHarness(str(tmp_path / "h")),
        "pipeline_test": functools.partial(check_cases, workdir=tmp_path),
        "tmp_path": tmp_path,
    }
    params = fn.__code__.co_varnames[: fn.__code__.co_argcount]
    (tmp_path / "h").mkdir()
    fn(**{p: kwargs[p] for p in params})
    assert os.getcwd() == str(ROOT)


def test_getting_started_node_worker_passes_check_worker(tmp_path):

    code = re.search(r"```js\n(.*?)```", (ROOT / "docs" / "getting-started.md").read_text(), re.S).group(1)
    (tmp_path / "shout.js").write_text(code)
    (tmp_path / "sdk").symlink_to(ROOT / "sdk")  # saved in the checkout's folder, as the page says
    r = etlstage(ROOT, "check-worker", "--type", "T", "--", "node", str(tmp_path / "shout.js"))
    assert r.code == 0, r.stdout
    assert "8 passed, 0 failed" in r.stdout


def _yaml_blocks():
    for doc in sorted((ROOT / "docs").rglob("*.md")):
        for n, block in enumerate(re.findall(r"```ya?ml\n(.*?)```", doc.read_text(), re.S)):
            yield pytest.param(block, id=f"{doc.relative_to(ROOT)}#{n}")


YAML_BLOCKS = list(_yaml_blocks())


def _commands(node: object):
    """Every ``command:`` value in a parsed block (stages, services, fragments), as an argv."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "command" and isinstance(value, (list, str)):
                yield shlex.split(value) if isinstance(value, str) else [str(v) for v in value]
            else:
                yield from _commands(value)
    elif isinstance(node, list):
        for item in node:
            yield from _commands(item)


def _check_spark_load(argv: list[str]) -> None:
    from etlstage_workers.spark.cli import build_parser, config_from_args

    config_from_args(build_parser().parse_args(argv))


def _check_kinesis(argv: list[str]) -> None:
    from etlstage_workers.kinesis.options import build_parser, options_from_args

    options_from_args(build_parser().parse_args(argv))


def _check_rdss(argv: list[str]) -> None:
    from etlstage_workers.rdss.cli import parse_args

    parse_args(argv)


def _check_kcl_adapter(argv: list[str]) -> None:
    from etlstage_workers.kcl.cli import build_parser

    assert build_parser().parse_args(argv).command, "no record processor command after --"


# Each stock worker's own command line: argparse plus the checks it runs before starting.
STOCK_WORKERS = {
    "etlstage-spark-load": _check_spark_load,
    "etlstage-kinesis": _check_kinesis,
    "etlstage-rdss": _check_rdss,
    "etlstage-kcl-adapter": _check_kcl_adapter,
}


def test_the_docs_have_yaml_examples_with_stock_worker_commands():
    import yaml

    programs = {argv[0] for b in YAML_BLOCKS for argv in _commands(yaml.safe_load(b.values[0])) if argv}
    assert set(STOCK_WORKERS) <= programs


@pytest.mark.parametrize("block", YAML_BLOCKS)
def test_yaml_examples_in_the_docs_parse_and_their_stock_worker_commands_are_accepted(block):
    import yaml

    data = yaml.safe_load(block)  # an unparsable block fails here
    for argv in _commands(data):
        check = STOCK_WORKERS.get(argv[0]) if argv else None
        if check is None:
            continue
        err = io.StringIO()
        try:
            with contextlib.redirect_stderr(err):
                check(argv[1:])
        except SystemExit as exc:  # argparse's usage error
            pytest.fail(f"{shlex.join(argv)}: exit {exc.code}: {err.getvalue().strip()}")
        except ConfigError as exc:
            pytest.fail(f"{shlex.join(argv)}: {exc}")
    stages = data.get("stages") if isinstance(data, dict) else None
    if isinstance(stages, list) and all(isinstance(s, dict) and "command" in s for s in stages):
        # A complete stages.yaml (not an excerpt with "# ..." stages): the supervisor accepts it.
        config = parse_config(block, "example")
        assert [s.name for s in config.stages] == [s["name"] for s in stages]


def test_no_document_is_left_with_a_figure_placeholder() -> None:
    """Benchmarks fill tables in by hand; a placeholder (``STOCK_TABLE``) left in a page
    would publish a figure that was never measured."""
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    left = [
        f"{page.relative_to(ROOT)}:{n}: {line.strip()}"
        for page in pages
        for n, line in enumerate(page.read_text().splitlines(), 1)
        if re.search(r"\b[A-Z][A-Z0-9]*_(TABLE|LINE|FIGURES?)\b", line)
    ]
    assert not left, "placeholders left in the docs:\n" + "\n".join(left)
