"""The end-of-run summary of a Spark run counts every committed micro-batch once, even when
the listener's progress event for the last one arrives after the query ended."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from etlstage.config.loader import parse_config
from etlstage.spark.driver.config import apply_flags
from etlstage.spark.driver.report import Counts

STAGES = """
stages:
  - {name: ext, type: E, mode: cyclic, command: [cat]}
  - {name: load, type: L, command: [cat]}
"""


def batch(batch_id: int, extracted: int) -> SimpleNamespace:
    row = {"rows": extracted, "bytes": extracted * 3}
    return SimpleNamespace(
        batchId=batch_id, observedMetrics={"etlstage_E_ext": row}, numInputRows=extracted, durationMs={}
    )


def counts(tmp_path: Path) -> Counts:
    text = STAGES
    (tmp_path / "stages.yaml").write_text(text)
    config = apply_flags(parse_config(text, str(tmp_path / "stages.yaml"), base_dir=str(tmp_path)), "spark", None)
    return Counts(config)


def test_the_last_batch_is_taken_from_the_query_when_its_event_is_late(tmp_path: Path) -> None:
    c = counts(tmp_path)
    c.progress(batch(0, 20))
    c.progress(batch(1, 20))  # the listener has seen two; the query committed three
    c.finish(SimpleNamespace(recentProgress=[batch(0, 20), batch(1, 20), batch(2, 20)]))
    assert c.batches == 3
    assert c.stats["ext"].messages_out == 60
    assert "extracted 60 messages" in c.summary()


def test_a_batch_brought_twice_is_counted_once(tmp_path: Path) -> None:
    c = counts(tmp_path)
    c.finish(SimpleNamespace(recentProgress=[batch(0, 20), batch(1, 20)]))
    c.progress(batch(1, 20))  # the listener's event, after the summary was taken
    assert c.batches == 2 and c.stats["ext"].messages_out == 40
