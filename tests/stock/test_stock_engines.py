"""The getting-started sequence: the stock demo on the supervisor engine, then the same
stages.yaml with ``--engine spark``. The two engines keep separate stream positions, so
the second run reads the demo stream again; the Delta tables' MERGE by messageId must
leave each message once (two engines' separate key indexes used to hold it twice)."""

from __future__ import annotations

import json
import shutil
from collections import Counter
from pathlib import Path

import pytest

from tests.stock.test_stock_pipeline import ROOT, tables
from tests.support.run_cli import RUN_ONCE, etlstage

RUN_S = 400


@pytest.mark.slow  # two runs of the stock pipeline, a JVM each
@pytest.mark.timeout(2 * RUN_S + 60)
def test_getting_started_supervisor_then_spark_engine_leaves_each_message_id_once(tmp_path: Path) -> None:
    shutil.copy(ROOT / "stages.yaml", tmp_path / "stages.yaml")
    first = etlstage(tmp_path, *RUN_ONCE[3:], timeout=RUN_S)
    assert first.code == 0, first.stderr[-5000:]
    spark = etlstage(tmp_path, "run", "--engine", "spark", "--master", "local[2]", *RUN_ONCE[4:], timeout=RUN_S)
    assert spark.code == 0, spark.stderr[-5000:]

    expected = json.loads((tmp_path / ".etlstage/demo/expected.json").read_text())
    want: dict[str, list[tuple[str, str | None]]] = {"valid": [], "invalid": [], "error": []}
    for message_id, fate in expected["messages"].items():
        want[fate["table"]].append((message_id, fate["errorCode"]))
    got = tables(tmp_path / "output/rdss")
    for table in ("valid", "invalid"):
        per_id = Counter(message_id for message_id, _ in got[table])
        assert max(per_id.values()) == 1, f"{table}: {[k for k, n in per_id.items() if n > 1][:5]} more than once"
        assert got[table] == sorted(want[table]), table
