"""The repository's stages.yaml, end to end on embedded defaults: Kinesis emulator ->
RDSS transformer -> Spark loader, 5,000 generated RDSS records with every kind of bad
input; the Parquet tables must hold exactly the expected messages."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow.dataset as ds

ROOT = Path(__file__).parent.parent


def tables(out: Path) -> dict[str, list[tuple[str, str | None]]]:
    got = {}
    for table in ("valid", "invalid", "error"):
        path = out / table
        rows = (
            ds.dataset(str(path), format="parquet").to_table(columns=["messageId", "errorCode"]).to_pylist()
            if path.exists()
            else []
        )
        got[table] = sorted((r["messageId"], r["errorCode"]) for r in rows)
    return got


def test_stock_pipeline_loads_exactly_the_expected_tables(tmp_path):
    shutil.copy(ROOT / "stages.yaml", tmp_path / "stages.yaml")
    run = subprocess.run(
        [sys.executable, "-m", "etlstage.cli", "run", "stages.yaml", "--once", "--no-progress"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert run.returncode == 0, run.stderr[-5000:]
    expected = json.loads((tmp_path / ".etlstage/demo/expected.json").read_text())
    assert expected["counts"]["records"] >= 5000
    want: dict[str, list[tuple[str, str | None]]] = {"valid": [], "invalid": [], "error": []}
    for message_id, fate in expected["messages"].items():
        want[fate["table"]].append((message_id, fate["errorCode"]))
    got = tables(tmp_path / "output/rdss")
    for table in want:
        assert got[table] == sorted(want[table]), table  # exactly these ids, codes, no duplicates
    assert "extracted 5,000 messages" in run.stderr
    # a second run finds the stream consumed and the tables unchanged
    again = subprocess.run(
        [sys.executable, "-m", "etlstage.cli", "run", "stages.yaml", "--once", "--no-progress"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert again.returncode == 0, again.stderr[-5000:]
    assert tables(tmp_path / "output/rdss") == got
