"""The Spark engine's spool: windows written in partitions on the driver, read back by tasks
through the driver line in bounded pieces."""

from __future__ import annotations

from pathlib import Path

import pytest

from etlstage.errors import PipelineError
from etlstage.spark.driver_line import DriverLine, read_piece
from etlstage.spark.tasks.spool import spool_blocks, write_window


def serving(folder: Path) -> DriverLine:
    return DriverLine({"spool": lambda header, _: read_piece(folder, header)})


def test_a_window_is_cut_into_partitions_and_read_back_in_pieces_ending_with_eom(tmp_path: Path) -> None:
    block = b"".join(b"%d-%s\n" % (i, b"x" * (i % 50)) for i in range(5000))
    write_window(tmp_path, "7", [block], 0x0A, 3)
    parts = [tmp_path / f"7-{p}.bin" for p in range(3)]
    assert b"".join(p.read_bytes() for p in parts) == block
    counts = [p.read_bytes().count(b"\n") for p in parts]
    assert max(counts) - min(counts) <= 1  # about equal message counts
    with serving(tmp_path) as line:
        reach = line.address
        pieces = [b for p in parts for b in spool_blocks(reach.read("s", p.name, piece=1000), 0x0A, p.name)]
    assert b"".join(pieces) == block
    assert all(b.endswith(b"\n") and len(b) < 1000 + 60 for b in pieces)
    assert len(pieces) > 3 * 10


def test_a_missing_or_cut_spool_file_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "1-0.bin").write_bytes(b"a\nb\ncut")
    with serving(tmp_path) as line:
        reach = line.address
        with pytest.raises(PipelineError, match="spooled window .*0-0.bin is missing on the driver"):
            list(spool_blocks(reach.read("s", "0-0.bin"), 0x0A, "0-0.bin"))
        with pytest.raises(PipelineError, match=r"ends in the middle of a message \(3 bytes\)"):
            list(spool_blocks(reach.read("s", "1-0.bin"), 0x0A, "1-0.bin"))


def test_the_driver_line_serves_spool_files_only_and_only_with_the_runs_token(tmp_path: Path) -> None:
    (tmp_path / "secret.txt").write_bytes(b"not for tasks")
    (tmp_path / "0-0.bin").write_bytes(b"a\n")
    with serving(tmp_path) as line:
        reach = line.address
        with pytest.raises(PipelineError, match="not a spooled window's name"):
            list(reach.read("s", "../secret.txt"))
        stranger = type(reach)(reach.host, reach.port, "0" * 32)
        with pytest.raises(PipelineError, match="not this run's token"):
            list(stranger.read("s", "0-0.bin"))
        assert reach.token not in repr(reach)
        assert b"".join(reach.read("s", "0-0.bin")) == b"a\n"


@pytest.mark.parametrize("messages", [1, 2, 3, 63, 64, 65, 1000])
def test_every_spool_file_holds_whole_messages_of_about_equal_counts(tmp_path: Path, messages: int) -> None:
    """Fewer messages than files, around the count where the cut starts guessing (64), and
    sizes that vary: every file ends at a message's end, their counts differ by one at most."""
    block = b"".join(b"%d%s\n" % (i, b"y" * (i * 7 % 300)) for i in range(messages))
    write_window(tmp_path, "3", [block], 0x0A, 4)
    files = [(tmp_path / f"3-{p}.bin").read_bytes() for p in range(4)]
    assert b"".join(files) == block
    assert all(not f or f.endswith(b"\n") for f in files)
    counts = [f.count(b"\n") for f in files]
    assert max(counts) - min(counts) <= 1, counts
