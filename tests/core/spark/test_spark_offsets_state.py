"""The Spark engine's supervisor-managed offsets are the pipeline's: read at the first batch, written at each commit."""

from __future__ import annotations

from pathlib import Path

from etlstage.config.loader import parse_config
from etlstage.spark.driver.config import apply_flags
from etlstage.spark.tasks.plan import Plan
from etlstage.spark.tasks.source import PolicyReader, WindowPartition
from etlstage.state.store import StateStore
from tests.conftest import PY, TW

STAGES = f"""
stages:
  - {{name: ext, type: E, mode: cyclic, offsets: supervisor, offset_policy: {{type: counter, start: 0, step: 10}},
     instances: 3, command: [{PY}, {TW}, count, "100"]}}
  - {{name: load, type: L, command: [{PY}, {TW}, append, out.txt]}}
engine: {{kind: spark}}
"""


def reader(tmp: Path) -> PolicyReader:
    config = apply_flags(parse_config(STAGES, str(tmp / "stages.yaml"), base_dir=str(tmp)), "spark", None)
    return PolicyReader(Plan(config), config.stage("ext"))


def test_the_first_batch_starts_where_the_pipeline_committed(tmp_path: Path) -> None:
    r = reader(tmp_path)
    assert r.initialOffset() == {"next": 0}  # nothing committed: the policy's start
    r.latestOffset({"next": 0}, None)  # type: ignore[arg-type]
    store = StateStore(r.plan.config.state_dir)
    assert store.checkpoints() == []  # the first offset is no committed window
    for i in range(3):
        store.commit(f"ext#{i}", 0, 30, 10)
    store.close()
    start = r.initialOffset()
    assert start == {"next": 30}
    end = r.latestOffset(start, None)  # type: ignore[arg-type]
    requests = [p.request for p in r.partitions(start, end) if isinstance(p, WindowPartition)]
    assert requests == [{"start": 30, "end": 40}] * 3


def test_a_committed_batch_is_the_pipelines_committed_window_once(tmp_path: Path) -> None:
    r = reader(tmp_path)
    r.counts.mkdir(parents=True)
    for i, n in enumerate((4, 3, 3)):
        (r.counts / f"10-{i}").write_text(str(n))
    # planning the next batch means this one committed (Spark calls commit() late, or never for a run's last)
    r.latestOffset({"next": 10}, None)  # type: ignore[arg-type]
    reader(tmp_path).latestOffset({"next": 10}, None)  # type: ignore[arg-type]  # a restart plans from there again
    r.commit({"next": 10})  # and told at last: recorded once
    store = StateStore(r.plan.config.state_dir)
    assert [(c.source, c.committed_end, c.windows_done, c.messages) for c in store.checkpoints()] == [
        ("ext#0", 10, 1, 4),
        ("ext#1", 10, 1, 3),
        ("ext#2", 10, 1, 3),
    ]
    store.close()
    assert reader(tmp_path).initialOffset() == {"next": 10}  # what the next run on either engine reads
