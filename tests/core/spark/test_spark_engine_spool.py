"""The Spark engine's spool: windows written in partitions and read back in bounded pieces."""

from __future__ import annotations

from pathlib import Path

import pytest

from etlstage.errors import PipelineError
from etlstage.spark.spool import spool_blocks, write_window


def test_a_window_is_cut_into_partitions_and_read_back_in_pieces_ending_with_eom(tmp_path: Path) -> None:
    block = b"".join(b"%d-%s\n" % (i, b"x" * (i % 50)) for i in range(5000))
    write_window(tmp_path, "7", block, 0x0A, 3)
    parts = [tmp_path / f"7-{p}.bin" for p in range(3)]
    assert b"".join(p.read_bytes() for p in parts) == block
    counts = [p.read_bytes().count(b"\n") for p in parts]
    assert max(counts) - min(counts) <= 1  # about equal message counts
    pieces = [b for p in parts for b in spool_blocks(str(p), 0x0A, size=1000)]
    assert b"".join(pieces) == block
    assert all(b.endswith(b"\n") and len(b) < 1000 + 60 for b in pieces)
    assert len(pieces) > 3 * 10


def test_a_missing_or_cut_spool_file_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(PipelineError, match="is missing: the checkpoint directory must be a path every executor"):
        list(spool_blocks(str(tmp_path / "0-0.bin"), 0x0A))
    (tmp_path / "1-0.bin").write_bytes(b"a\nb\ncut")
    with pytest.raises(PipelineError, match=r"ends in the middle of a message \(3 bytes\)"):
        list(spool_blocks(str(tmp_path / "1-0.bin"), 0x0A))
