"""sdk/examples/stages.yaml: workers in five languages (Python, Node.js, Go, Rust, Java),
each on its SDK, in one pipeline, end to end on both engines with the exact output."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.support.engines import ENGINES, Engine
from tests.support.run_cli import PY

SDK = Path(__file__).resolve().parents[2] / "sdk"

pytestmark = [pytest.mark.timeout(600), pytest.mark.slow]  # the Java stage starts a JVM


@pytest.fixture(params=ENGINES)
def engine(
    request: pytest.FixtureRequest, tmp_path: Path, go_examples: Path, rust_examples: Path, java_classes: Path
) -> Engine:
    if shutil.which("node") is None:
        pytest.skip("node is not installed")
    return Engine(request.param, request, tmp_path)


def test_mixed_language_pipeline_loads_every_message_once(engine: Engine) -> None:
    shutil.copy(SDK / "examples" / "label.py", engine.tmp)
    # The pipeline as shipped, its relative commands pointed at this checkout's sdk/.
    text = (SDK / "examples" / "stages.yaml").read_text()
    text = text.replace('"../', f'"{SDK}/').replace('"python"', f'"{PY}"')
    code, log = engine.run(text)
    assert code == 0, log[-3000:]
    # the Go sink commits each batch by its id: one file a batch, the lines in any order, each once
    lines = engine.batch_lines("output/mixed")
    assert sorted(lines, key=lambda s: int(s.split()[1])) == [f"ITEM {n} ✓" for n in range(1, 101)], log[-3000:]
