"""The driver's inbox without Spark: a native stage's write-once files (a Kinesis task's
reached positions) kept on the driver, first writer wins, names confined to the stage's folder."""

from __future__ import annotations

from pathlib import Path

import pytest

from etlstage.errors import PipelineError
from etlstage.spark.inbox import Inbox, KeepOnce, keep_once, relative


def test_keep_once_keeps_the_first_attempts_file_and_reads_it_back(tmp_path: Path) -> None:
    def once(header: dict, payload: bytes) -> tuple[dict, bytes]:
        path = tmp_path / relative(header["name"])
        if header.get("peek"):
            return ({"found": True}, path.read_bytes()) if path.exists() else ({"found": False}, b"")
        return {"found": True}, keep_once(path, payload)

    with Inbox({"once": once}) as inbox:
        keep = KeepOnce.from_option(KeepOnce(inbox.address, "kin").to_option())  # as a string option travels
        assert keep is not None
        assert keep("kinesis-reached/3/shard-0.json", None) is None
        assert keep("kinesis-reached/3/shard-0.json", b"first") == b"first"
        assert keep("kinesis-reached/3/shard-0.json", b"second") == b"first"  # a second attempt never replaces it
        assert keep("kinesis-reached/3/shard-0.json", None) == b"first"
        with pytest.raises(PipelineError, match="not a file name inside the stage's folder"):
            keep("../../state.db", b"x")
    assert (tmp_path / "kinesis-reached" / "3" / "shard-0.json").read_bytes() == b"first"


def test_a_task_that_cannot_reach_the_driver_fails_naming_the_address() -> None:
    with Inbox({}) as inbox:
        gone = inbox.address
    with pytest.raises(PipelineError, match=rf"cannot reach the driver's inbox at 127.0.0.1:{gone.port} \(spool\)"):
        list(gone.read("s", "0-0.bin"))
