"""Files that survive a crash (state.durable): the order of the steps is the guarantee,
since a test cannot pull the power: the bytes synced before the rename makes them the
file, the folder synced after it, and nothing left beside the file."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from etlstage.state import durable


def test_a_durable_write_syncs_the_data_then_renames_then_syncs_the_folder(tmp_path: Path, monkeypatch) -> None:
    steps: list[tuple[str, str]] = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd: int) -> None:
        st = os.fstat(fd)
        steps.append(("fsync folder" if stat.S_ISDIR(st.st_mode) else "fsync file", os.readlink(f"/proc/self/fd/{fd}")))
        real_fsync(fd)

    def replace(src: str | Path, dst: str | Path) -> None:
        steps.append(("rename", str(dst)))
        real_replace(src, dst)

    monkeypatch.setattr(durable.os, "fsync", fsync)
    monkeypatch.setattr(durable.os, "replace", replace)
    target = tmp_path / "offset"
    target.write_bytes(b"41")
    durable.write_durably(target, b"42")
    assert [kind for kind, _ in steps] == ["fsync file", "rename", "fsync folder"], steps
    assert steps[0][1].startswith(str(tmp_path / ".offset.")) and steps[2][1] == str(tmp_path)
    assert target.read_bytes() == b"42" and os.listdir(tmp_path) == ["offset"]


def test_a_durable_write_that_fails_leaves_the_old_file_whole(tmp_path: Path, monkeypatch) -> None:
    target = tmp_path / "offset"
    target.write_bytes(b"41")

    def full_disk(fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(durable.os, "fsync", full_disk)
    with pytest.raises(OSError, match="No space left"):
        durable.write_durably(target, b"42")
    assert target.read_bytes() == b"41" and os.listdir(tmp_path) == ["offset"]
