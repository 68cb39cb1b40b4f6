"""The real amazon_kclpy (unmodified, from its PyPI sdist) behind etlstage-kcl-adapter."""

from __future__ import annotations

import sqlite3
import sys

import pytest

from tests.support.kcl import CHILDREN, EOP, batches_to_bytes, envelope, kclpy_dir, run_adapter, shard_end

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module")
def kclpy():
    return kclpy_dir()


def _workload() -> tuple[list[list[bytes]], list[bytes]]:
    """3000 records: 2 Kinesis shards as envelopes (one of them ends) and plain messages."""
    messages: list[bytes] = []
    for i in range(3000):
        if i % 3 == 0:
            messages.append(envelope("shardId-000000000007", 1000 + i, f"a-{i}"))
        elif i % 3 == 1:
            messages.append(envelope("shardId-000000000008", 5000 + i, f"b-{i}"))
        else:
            messages.append(f"plain-{i}".encode())
    messages.append(shard_end("shardId-000000000007"))
    batches = [messages[i : i + 97] for i in range(0, len(messages), 97)]
    return batches, messages


@pytest.mark.parametrize("processor", ["kclpy_v3_processor.py", "kclpy_v2_processor.py"])
def test_kclpy_processor_sees_every_record_and_checkpoints(tmp_path, kclpy, processor):
    batches, _ = _workload()
    run = run_adapter(
        tmp_path,
        [sys.executable, str(CHILDREN / processor)],
        batches_to_bytes(batches),
        batch_size=97,
        kclpy=kclpy,
        env={"KCL_TEST_CHECKPOINT_EVERY": "300"},
    )
    assert run.returncode == 0, run.stderr
    # the tap: every input message back unchanged, one EOP per batch, in order
    assert run.stdout == b"".join(b"".join(m + b"\n" for m in batch) + EOP for batch in batches)

    records = run.records()
    datas = [r[5] for r in records]
    assert sorted(datas) == sorted(
        [f"a-{i}" for i in range(0, 3000, 3)]
        + [f"b-{i}" for i in range(1, 3000, 3)]
        + [f"plain-{i}" for i in range(2, 3000, 3)]
    )
    by_shard: dict[str, list[int]] = {}
    for shard, seq, sub, pk, arrival, data in records:
        by_shard.setdefault(shard, []).append(int(seq))
        assert sub == "0"
        if data.startswith("a-"):
            assert shard == "shardId-000000000007" and int(seq) == 1000 + int(data[2:])
            assert arrival == str(1700000000000 + int(seq)) and pk == f"pk-{int(seq) % 7}"
        if data.startswith("plain-"):
            assert shard == "shardId-000000000000" and len(seq) == 20 and len(pk) == 32
    assert set(by_shard) == {"shardId-000000000007", "shardId-000000000008", "shardId-000000000000"}
    for seqs in by_shard.values():
        assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)

    ok = run.events("checkpoint-ok")
    assert len(ok) >= 6, run.out_lines[-20:]
    assert not run.events("checkpoint-error")
    db = sqlite3.connect(tmp_path / "state" / "kcl-multilang.sqlite")
    stored = dict(db.execute("SELECT shard_id, sequence_number FROM kcl_checkpoint WHERE stage='kcl'"))
    assert stored["shardId-000000000007"] == "SHARD_END"
    if processor == "kclpy_v3_processor.py":
        # v3 checkpoints at shutdownRequested: the last records delivered
        assert stored["shardId-000000000008"] == f"{5000 + 2998:056d}"
        assert stored["shardId-000000000000"] == "00000000000000001000"
        assert [e[1] for e in run.events("shard_ended")] == ["shardId-000000000007"]
        assert sorted(e[1] for e in run.events("lease_lost")) == ["shardId-000000000000", "shardId-000000000008"]
        assert sorted(e[1] for e in run.events("shutdown_requested")) == [
            "shardId-000000000000",
            "shardId-000000000008",
        ]
    else:
        reasons = sorted((e[1], e[2]) for e in run.events("shutdown"))
        assert reasons == [
            ("shardId-000000000000", "ZOMBIE"),
            ("shardId-000000000007", "TERMINATE"),
            ("shardId-000000000008", "ZOMBIE"),
        ]
    assert "processed a batch of" in run.stderr or processor != "kclpy_v3_processor.py"  # print() logged, not fatal


def test_restart_resumes_after_the_checkpoint(tmp_path, kclpy):
    """A replayed window: the child is initialised at its checkpoint and records at or
    below it are not delivered again, while the tap still passes them through."""
    first = [[envelope("shardId-000000000001", n, f"r{n}") for n in range(1, 11)]]
    run = run_adapter(
        tmp_path,
        [sys.executable, str(CHILDREN / "kclpy_v3_processor.py")],
        batches_to_bytes(first),
        kclpy=kclpy,
        env={"KCL_TEST_CHECKPOINT_EVERY": "1"},
    )
    assert run.returncode == 0, run.stderr
    (tmp_path / "processor-out.txt").unlink()
    replay = [[envelope("shardId-000000000001", n, f"r{n}") for n in range(8, 14)]]
    run = run_adapter(
        tmp_path,
        [sys.executable, str(CHILDREN / "kclpy_v3_processor.py")],
        batches_to_bytes(replay),
        kclpy=kclpy,
        env={"KCL_TEST_CHECKPOINT_EVERY": "1"},
    )
    assert run.returncode == 0, run.stderr
    assert run.events("initialize") == [["initialize", "shardId-000000000001", f"{10:056d}", "0"]]
    assert [r[5] for r in run.records()] == ["r11", "r12", "r13"]
    assert run.stdout == b"".join(m + b"\n" for m in replay[0]) + EOP


def test_kclpy_invalid_checkpoint_gets_the_kcl_exception_name(tmp_path, kclpy):
    batches = [[b"x1", b"x2"], [b"x3"]]
    run = run_adapter(
        tmp_path,
        [sys.executable, str(CHILDREN / "kclpy_v3_processor.py")],
        batches_to_bytes(batches),
        kclpy=kclpy,
        env={"KCL_TEST_BAD_CHECKPOINT": "123456789012345678901234567890"},
    )
    assert run.returncode == 0, run.stderr
    errors = run.events("checkpoint-error")
    assert len(errors) == 2 and all(e[-1] == "IllegalArgumentException" for e in errors)
    assert len(run.records()) == 3


def test_the_sample_app_shipped_with_amazon_kclpy(tmp_path, kclpy):
    """amazon_kclpy's own samples/sample_kclpy_app.py, not a line changed."""
    messages = [envelope("shardId-000000000002", n, f"s{n}") for n in range(1, 151)]
    messages += [shard_end("shardId-000000000002")] + [f"plain-{n}".encode() for n in range(150)]
    batches = [messages[i : i + 50] for i in range(0, len(messages), 50)]
    run = run_adapter(
        tmp_path,
        [sys.executable, str(kclpy / "samples" / "sample_kclpy_app.py")],
        batches_to_bytes(batches),
        batch_size=50,
        kclpy=kclpy,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.count(EOP) == len(batches)
    assert run.stderr.count("Record (Partition Key:") == 300  # its process_record logs every record
    db = sqlite3.connect(tmp_path / "state" / "kcl-multilang.sqlite")
    stored = dict(db.execute("SELECT shard_id, sequence_number FROM kcl_checkpoint"))
    # shard_ended() and shutdown_requested() both call checkpoint() with no sequence number
    assert stored == {"shardId-000000000002": "SHARD_END", "shardId-000000000000": "00000000000000000150"}
