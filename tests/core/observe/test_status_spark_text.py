"""`etlstage status` after a Spark run: the Spark engine's status document, rendered by the
renderer the supervisor's goes through (its checkpoint first), with no JVM: the checkpoint's
files are laid out as Spark writes them."""

from __future__ import annotations

from pathlib import Path

from etlstage.config.loader import load_config
from etlstage.observe.status import render
from etlstage.spark.live import status_document
from tests.core.spark.test_spark_checkpoint_check import COMMIT, OFFSETS, _write
from tests.support.run_cli import etlstage

STAGES = """
engine: {kind: spark}
stages:
  - {name: ext, type: E, mode: cyclic, command: [cat]}
  - {name: load, type: L, command: [cat]}
"""


def test_status_of_a_spark_run_is_rendered_as_the_supervisors(tmp_path: Path) -> None:
    (tmp_path / "stages.yaml").write_text(STAGES)
    checkpoint = tmp_path / ".etlstage" / "stages" / "spark-checkpoint"
    _write(checkpoint / "metadata", b'{"id":"0f2c"}\n')
    for n in (0, 1):
        _write(checkpoint / "offsets" / str(n), OFFSETS)
    _write(checkpoint / "commits" / "0", COMMIT)  # batch 1 in flight

    shown = etlstage(tmp_path, "status", "stages.yaml")
    assert shown.code == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert lines[:4] == [
        "engine: spark",
        f"checkpoint: {checkpoint}",
        lines[2],
        "in flight: #1 (replayed with the same offsets if the query stopped)",
    ]
    assert lines[2].startswith("micro-batches committed: 1 (last #0 at 20"), lines[2]
    assert '  ext                  offset {"seq": 1}' in lines
    # what the supervisor's status says too, from the same renderer
    assert "running: no" in lines and "dead letters: 0 (0 new)" in lines, shown.stdout
    assert any(line.startswith("state: ") for line in lines)
    config = load_config(str(tmp_path / "stages.yaml"))
    expected = render(status_document(config), str(Path(config.state_dir) / "state.db"))

    def timeless(text: list[str]) -> list[str]:
        return [line for line in text if "at 20" not in line and ", open " not in line]

    assert timeless(lines) == timeless(expected)


def test_a_spark_pipeline_with_no_batch_yet_says_so(tmp_path: Path) -> None:
    (tmp_path / "stages.yaml").write_text(STAGES)
    shown = etlstage(tmp_path, "status", "stages.yaml")
    assert shown.code == 0, shown.stderr
    assert shown.stdout.splitlines()[:2] == [
        "engine: spark",
        f"checkpoint: {tmp_path / '.etlstage' / 'stages' / 'spark-checkpoint'} (no micro-batch yet)",
    ]
    assert "running: no" in shown.stdout
