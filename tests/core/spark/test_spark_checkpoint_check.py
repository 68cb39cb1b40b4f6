"""The check of Spark's checkpoint before a query starts, on files laid out as Spark writes them
(no JVM: the end-to-end cases are in test_spark_engine_security.py)."""

from __future__ import annotations

import struct
import zlib
from pathlib import Path

import pytest

from etlstage.errors import StateError
from etlstage.spark.checkpoint import check_checkpoint

OFFSETS = b'v1\n{"batchWatermarkMs":0,"batchTimestampMs":1,"conf":{}}\n{"seq": 1}'
COMMIT = b'v1\n{"nextBatchWatermarkMs":0}'


def _write(path: Path, data: bytes) -> None:
    """``path`` and its Hadoop checksum file, as Spark's local file system writes them."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    sums = b"".join(struct.pack(">I", zlib.crc32(data[i : i + 512])) for i in range(0, len(data), 512))
    path.with_name(f".{path.name}.crc").write_bytes(b"crc\0" + struct.pack(">i", 512) + sums)


@pytest.fixture
def checkpoint(tmp_path: Path) -> Path:
    root = tmp_path / "checkpoint"
    _write(root / "metadata", b'{"id":"0f2c"}\n')
    for n in (0, 1):
        _write(root / "offsets" / str(n), OFFSETS)
    _write(root / "commits" / "0", COMMIT)  # batch 1 in flight
    return root


def test_a_sound_checkpoint_and_none_at_all_pass(checkpoint: Path, tmp_path: Path) -> None:
    check_checkpoint(checkpoint)
    check_checkpoint(tmp_path / "never-ran")
    (tmp_path / "only-metadata").mkdir()
    (tmp_path / "only-metadata" / "metadata").write_text('{"id":"x"}')
    check_checkpoint(tmp_path / "only-metadata")


def test_a_change_that_keeps_the_format_is_found_by_the_checksum(checkpoint: Path) -> None:
    (checkpoint / "commits" / "0").write_bytes(COMMIT.replace(b"0}", b"7}"))
    with pytest.raises(StateError, match=r"commits/0 it does not match its checksum file \.0\.crc"):
        check_checkpoint(checkpoint)


@pytest.mark.parametrize(
    ("file", "data", "problem", "todo"),
    [
        ("offsets/1", OFFSETS[:5], "cut short", "remove it (rm "),  # the batch in flight: planned again
        ("offsets/0", OFFSETS[:5], "cut short", "mv "),  # committed already: only a backup helps
        ("commits/0", b"\x00\xffgarbage", "is not text", "that batch runs again"),
        ("commits/0", b"v1\n", "cut short", "that batch runs again"),
        ("offsets/1", b"w1\n{}", "does not start with a log version", "remove it"),
        ("metadata", b"[]", "holds no query id", "mv "),
    ],
)
def test_a_damaged_entry_is_named_with_what_to_do(
    checkpoint: Path, file: str, data: bytes, problem: str, todo: str
) -> None:
    _write(checkpoint / file, data)  # a consistent checksum: the content alone is wrong
    with pytest.raises(StateError) as raised:
        check_checkpoint(checkpoint)
    text = str(raised.value)
    assert f"{checkpoint / file} " in text and problem in text and todo in text, text


def test_metadata_gone_while_batches_are_logged(checkpoint: Path) -> None:
    (checkpoint / "metadata").unlink()
    with pytest.raises(StateError, match="metadata is missing.*Move the checkpoint aside"):
        check_checkpoint(checkpoint)


def test_the_last_plan_of_a_committed_batch_is_not_to_be_removed(checkpoint: Path) -> None:
    _write(checkpoint / "commits" / "1", COMMIT)  # batch 1 committed: its plan is needed
    _write(checkpoint / "offsets" / "1", OFFSETS[:5])
    with pytest.raises(StateError, match="Move the checkpoint aside") as raised:
        check_checkpoint(checkpoint)
    assert "remove it" not in str(raised.value)
