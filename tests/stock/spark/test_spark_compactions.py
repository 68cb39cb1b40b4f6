"""Compactions that only happen after many batches: the native sink's key files (merged at
COMPACT_AFTER files) and a table's ``_spark_metadata`` log past its second compaction. Each
must keep everything: a key dropped is a duplicate loaded again, a file dropped from a
compaction is a batch Spark's readers never see."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from etlstage_workers.spark import native_sink, table_log
from etlstage_workers.spark import publish as pub

from .test_spark_table_log import logged, stage


def test_key_compaction_keeps_every_key(tmp_path: Path) -> None:
    out = str(tmp_path)
    root = tmp_path / native_sink.KEYS
    root.mkdir()
    n = native_sink.COMPACT_AFTER + 6
    keys = [[f"b{b}-k{k}" for k in range(3)] for b in range(n)]
    for b, batch_keys in enumerate(keys):
        pq.write_table(pa.table({"key": batch_keys}), root / f"i0-{b:04d}.parquet")
    native_sink._compact_keys(out)
    left = [f for f in os.listdir(root) if f.endswith(".parquet")]
    assert len(left) == 1 and left[0].startswith("compact-")  # merged...
    every = [k for batch_keys in keys for k in batch_keys]
    assert native_sink._known(out, pa.array(every)) == [True] * len(every)  # ...with every key
    assert native_sink._known(out, pa.array(["never"])) == [False]


def test_below_the_threshold_key_files_are_left_alone(tmp_path: Path) -> None:
    root = tmp_path / native_sink.KEYS
    root.mkdir()
    for b in range(native_sink.COMPACT_AFTER - 1):
        pq.write_table(pa.table({"key": [f"k{b}"]}), root / f"i0-{b:04d}.parquet")
    native_sink._compact_keys(str(tmp_path))
    assert len(os.listdir(root)) == native_sink.COMPACT_AFTER - 1


def _publish_batches(output: Path, n: int, rows: int = 1) -> list[str]:
    published = []
    for b in range(n):
        published += stage(output, f"i0-{b}", {"valid": 1}, rows=rows)
        pub.publish(str(output), f"i0-{b}")
        pub.remove(str(output), f"i0-{b}")
    return published


def _visible(logs: dict[str, list[str]]) -> list[str]:
    """What a reader of the log sees: the newest compaction, then the logs after it."""
    ids = sorted(int(name.split(".")[0]) for name in logs)
    last = max(i for i in ids if name_of(i, logs).endswith(".compact"))
    return [p for i in ids if i >= last for p in logs[name_of(i, logs)]]


def name_of(log_id: int, logs: dict[str, list[str]]) -> str:
    return f"{log_id}.compact" if f"{log_id}.compact" in logs else str(log_id)


def test_the_second_log_compaction_lists_every_file(tmp_path: Path) -> None:
    published = _publish_batches(tmp_path, 2 * table_log.COMPACT_INTERVAL + 3)
    logs = logged(tmp_path / "valid")
    assert logs["19.compact"] == published[:20]
    assert _visible(logs) == published


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_spark_reads_every_batch_past_two_compactions(spark: Any, tmp_path: Path) -> None:
    _publish_batches(tmp_path, 2 * table_log.COMPACT_INTERVAL + 3, rows=2)
    ids = {r.messageId for r in spark.read.parquet(str(tmp_path / "valid")).collect()}
    assert ids == {f"i0-{b}-valid-0-{r}" for b in range(23) for r in range(2)}
