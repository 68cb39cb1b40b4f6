"""Whole batches for Spark's readers: the tables' ``_spark_metadata`` log written by publish.

The unit tests stage files by hand (no Spark); the reader test reads the tables with real
Spark, which must see every logged batch — across a compaction — and nothing of a batch
whose files are in the table but not yet logged."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from etlstage_workers.spark import publish as pub
from etlstage_workers.spark import table_log


def stage(output: Path, batch: str, tables: dict[str, int], rows: int = 1) -> list[str]:
    """Staged files of ``batch`` as Spark leaves them (``__table=<t>/part-....parquet``),
    ``tables[t]`` files per table of ``rows`` rows each; their published paths."""
    out = Path(pub.batch_dir(str(output), batch)) / "out"
    published = []
    for table, n in tables.items():
        folder = out / f"__table={table}"
        folder.mkdir(parents=True, exist_ok=True)
        for i in range(n):
            name = f"part-{i:05d}-c000.snappy.parquet"
            ids = [f"{batch}-{table}-{i}-{r}" for r in range(rows)]
            pq.write_table(pa.table({"messageId": ids}), folder / name)
            published.append(pub.published_path(str(output), batch, f"__table={table}", name))
    return published


def logged(table: Path) -> dict[str, list[str]]:
    """Each log file's paths (file:// removed), by file name."""
    folder = table / table_log.METADATA
    out = {}
    for name in sorted(os.listdir(folder)):
        if name.startswith("."):
            continue
        lines = (folder / name).read_text().splitlines()
        assert lines[0] == "v1"
        entries = [json.loads(line) for line in lines[1:]]
        assert all(e["action"] == "add" and not e["isDir"] and e["size"] > 0 for e in entries)
        out[name] = [e["path"].removeprefix("file://") for e in entries]
    return out


def publish_killed_at(output: Path, batch: str, point: str) -> int:
    """Publish ``batch`` in another process, SIGKILLed at the crash point ``point``."""
    code = f"from etlstage_workers.spark import publish as pub; pub.publish({str(output)!r}, {batch!r})"
    env = {**os.environ, "ETLSTAGE_SPARK_LOAD_CRASH": point}
    return subprocess.run([sys.executable, "-c", code], env=env, timeout=60, check=False).returncode


def test_a_batch_is_logged_once_per_table_after_its_files(tmp_path: Path) -> None:
    files = stage(tmp_path, "i0-1", {"valid": 2, "invalid": 1})
    assert pub.publish(str(tmp_path), "i0-1") == 3
    assert logged(tmp_path / "valid") == {"0": sorted(f for f in files if "/valid/" in f)}
    assert logged(tmp_path / "invalid") == {"0": [f for f in files if "/invalid/" in f]}
    assert not (tmp_path / "error").exists()  # no file, no table, no log
    # published again (a crash after publishing, before the staging was removed): no second entry
    assert pub.publish(str(tmp_path), "i0-1") == 0
    assert list(logged(tmp_path / "valid")) == ["0"]

    more = stage(tmp_path, "i0-2", {"valid": 1})
    pub.remove(str(tmp_path), "i0-1")
    pub.publish(str(tmp_path), "i0-2")
    assert logged(tmp_path / "valid")["1"] == more


def test_a_publish_killed_between_two_tables_logs_each_once_when_run_again(tmp_path: Path) -> None:
    files = stage(tmp_path, "i0-7", {"error": 1, "valid": 1})
    assert publish_killed_at(tmp_path, "i0-7", "mid-log") == -9
    assert logged(tmp_path / "error") == {"0": [files[0]]}
    assert not (tmp_path / "valid" / table_log.METADATA).exists()  # killed before this table's log

    pub.publish(str(tmp_path), "i0-7")
    assert logged(tmp_path / "error") == {"0": [files[0]]}
    assert logged(tmp_path / "valid") == {"0": [files[1]]}


def test_the_first_log_keeps_older_files_visible_but_not_a_batch_in_progress(tmp_path: Path) -> None:
    old = tmp_path / "valid" / "part-before-00000.parquet"  # published before the log existed
    old.parent.mkdir(parents=True)
    pq.write_table(pa.table({"messageId": ["old"]}), old)
    other = stage(tmp_path, "i1-3", {"valid": 1})  # another instance's batch, killed mid-publish
    assert publish_killed_at(tmp_path, "i1-3", "mid-publish") == -9
    assert os.path.exists(other[0])

    mine = stage(tmp_path, "i0-3", {"valid": 1})
    pub.publish(str(tmp_path), "i0-3")
    assert sorted(logged(tmp_path / "valid")["0"]) == sorted([*mine, str(old)])  # not the other's file

    pub.publish(str(tmp_path), "i1-3")  # the other instance finishes: its own log
    assert logged(tmp_path / "valid")["1"] == other


def test_every_tenth_log_is_a_compaction_of_all_before(tmp_path: Path) -> None:
    published = []
    for n in range(12):
        published += stage(tmp_path, f"i0-{n}", {"valid": 1})
        pub.publish(str(tmp_path), f"i0-{n}")
        pub.remove(str(tmp_path), f"i0-{n}")
    logs = logged(tmp_path / "valid")
    assert sorted(logs, key=lambda n: int(n.split(".")[0])) == [*map(str, range(9)), "9.compact", "10", "11"]
    assert logs["9.compact"] == published[:10]
    assert logs["11"] == [published[11]]


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_spark_reads_whole_logged_batches_only(spark: Any, tmp_path: Path) -> None:
    """Twelve batches (a compaction among their logs) read in full; a batch whose files are
    in the table but not yet logged is not read at all — pyarrow, which ignores the log,
    does see its files."""
    for n in range(12):
        stage(tmp_path, f"i0-{n}", {"valid": 1}, rows=3)
        pub.publish(str(tmp_path), f"i0-{n}")
        pub.remove(str(tmp_path), f"i0-{n}")
    table = str(tmp_path / "valid")
    assert spark.read.parquet(table).count() == 36

    stage(tmp_path, "i0-12", {"valid": 2}, rows=5)
    assert publish_killed_at(tmp_path, "i0-12", "mid-publish") == -9  # one file moved, none logged
    assert pq.read_table(table).num_rows == 41  # a reader without the log sees part of the batch
    assert spark.read.parquet(table).count() == 36  # Spark: none of it

    pub.publish(str(tmp_path), "i0-12")
    ids = {r.messageId for r in spark.read.parquet(table).collect()}
    assert len(ids) == 46 and {f"i0-12-valid-{i}-{r}" for i in range(2) for r in range(5)} <= ids
