"""The examples in docs/testing.md run as written."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from etlstage.testing import StageHarness
from tests.support.run_cli import etlstage

ROOT = Path(__file__).resolve().parents[2]
BLOCKS = re.findall(r"```python\n(.*?)```", (ROOT / "docs" / "testing.md").read_text(), re.S)
TESTS = [b for b in BLOCKS if "def test_" in b]


@pytest.mark.parametrize("code", TESTS, ids=[re.search(r"def (test_\w+)", b).group(1) for b in TESTS])
def test_documented_example(code, tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)
    namespace: dict[str, object] = {}
    exec(compile(code, "docs/testing.md", "exec"), namespace)
    fn = next(v for k, v in namespace.items() if k.startswith("test_"))
    kwargs = {"stage_harness": StageHarness(str(tmp_path / "h")), "tmp_path": tmp_path}
    params = fn.__code__.co_varnames[: fn.__code__.co_argcount]
    (tmp_path / "h").mkdir()
    fn(**{p: kwargs[p] for p in params})
    assert os.getcwd() == str(ROOT)


def test_getting_started_node_worker_passes_check_worker(tmp_path):

    code = re.search(r"```js\n(.*?)```", (ROOT / "docs" / "getting-started.md").read_text(), re.S).group(1)
    (tmp_path / "shout.js").write_text(code)
    r = etlstage(ROOT, "check-worker", "--type", "T", "--mode", "single", "--", "node", str(tmp_path / "shout.js"))
    assert r.code == 0, r.stdout
    assert "5 passed, 0 failed" in r.stdout


def _yaml_examples():
    import yaml

    for doc in sorted((ROOT / "docs").rglob("*.md")):
        for block in re.findall(r"```yaml\n(.*?)```", doc.read_text(), re.S):
            try:
                data = yaml.safe_load(block)
            except yaml.YAMLError:
                continue
            stages = data.get("stages") if isinstance(data, dict) else None
            if (
                isinstance(stages, list)
                and len(stages) >= 2
                and all(isinstance(s, dict) and "command" in s for s in stages)
            ):
                yield pytest.param(block, id=f"{doc.relative_to(ROOT)}:{block.splitlines()[0][:30]}")


@pytest.mark.parametrize("block", list(_yaml_examples()))
def test_complete_stages_yaml_examples_in_the_docs_are_valid(block):
    from etlstage.config.loader import parse_config

    parse_config(block, "example")
