"""Records, wire lines, the store, and the checkpoint rules answered to a scripted child."""

from __future__ import annotations

import base64
import json
import sys

import pytest
from etlstage_workers.kcl import records, wire
from etlstage_workers.kcl.errors import InputError
from etlstage_workers.kcl.store import CheckpointStore

from tests.support.kcl import CHILDREN, batches_to_bytes, envelope, run_adapter, shard_end


def test_plain_message_gets_synthetic_metadata():
    p = records.classify(b"hello", "shardId-000000000002", 1234, "here")
    assert p.synthetic and p.shard_id == "shardId-000000000002"
    p.record.assign(7)
    assert p.record.sequence_number == "00000000000000000007" and p.record.key == (7, 0)
    assert base64.b64decode(p.record.data_b64) == b"hello"
    assert p.record.partition_key == "5d41402abc4b2a76b9719d911017c592" and p.record.arrival_ms == 1234


def test_json_that_is_not_an_envelope_is_a_plain_record():
    assert records.classify(b'{"sequenceNumber": "1", "data": "x"}', "s", 1, "here").synthetic
    assert records.classify(b"{not json", "s", 1, "here").synthetic


def test_envelope_variants():
    p = records.classify(envelope("shardId-1", 42, "héllo"), "default", 1, "here")
    assert not p.synthetic and p.shard_id == "shardId-1" and p.record.key == (42, 0)
    assert base64.b64decode(p.record.data_b64).decode() == "héllo"
    b64 = records.classify(
        envelope("s", 1, "AAEC", dataBase64=True, approximateArrivalTimestamp=1700000000.5), "d", 1, "here"
    )
    assert b64.record.data_b64 == "AAEC" and b64.record.arrival_ms == 1700000000500
    end = records.classify(shard_end("shardId-1"), "d", 1, "here")
    assert end.end and end.shard_id == "shardId-1"


@pytest.mark.parametrize(
    ("message", "complaint"),
    [
        (envelope("s", 1, "!!", dataEncoding="base64"), "is marked base64 but is not valid base64"),
        (envelope("s", 1, "x", subSequenceNumber=-1), "subSequenceNumber -1"),
        (envelope("s", 1, "x", approximateArrivalTimestamp="yesterday"), "approximateArrivalTimestamp 'yesterday'"),
        (json.dumps({"shardEnded": True}).encode(), "shard-end marker without a shardId"),
    ],
)
def test_bad_envelopes_are_named(message, complaint):
    with pytest.raises(InputError, match="batch 3, message 9") as err:
        records.classify(message, "d", 1, "batch 3, message 9")
    assert complaint in str(err.value)


def test_store_counters_and_checkpoints_persist(tmp_path):
    path = str(tmp_path / "kcl.sqlite")
    a, b = CheckpointStore(path, "stage"), CheckpointStore(path, "stage")
    assert a.allocate("s1", 10) == 1 and b.allocate("s1", 5) == 11 and a.allocate("s2", 1) == 1
    a.put("s1", "15", 0)
    assert b.get("s1") == ("15", 0) and b.get("s2") is None
    a.close()
    b.close()
    assert CheckpointStore(path, "stage").allocate("s1", 1) == 16
    assert CheckpointStore(path, "other").get("s1") is None


def test_v1_and_v2_lines_are_json():
    r = records.Record("aGk=", 'k"1', "5", 2, 99, 5)
    v2 = json.loads(wire.process_records(2, [r], 7))
    assert v2 == {
        "action": "processRecords",
        "millisBehindLatest": 7,
        "records": [
            {
                "action": "record",
                "data": "aGk=",
                "partitionKey": 'k"1',
                "sequenceNumber": "5",
                "subSequenceNumber": 2,
                "approximateArrivalTimestamp": 99,
            }
        ],
    }
    v1 = json.loads(wire.process_records(1, [r], 7))
    assert v1 == {
        "action": "processRecords",
        "records": [{"data": "aGk=", "partitionKey": 'k"1', "sequenceNumber": "5"}],
    }
    assert json.loads(wire.checkpoint_answer(1, "5", None, None)) == {
        "action": "checkpoint",
        "checkpoint": "5",
        "sequenceNumber": "5",
        "error": None,
    }


def test_checkpoint_rules(tmp_path):
    """The KCL's range rule: last checkpoint <= asked <= largest delivered."""

    def s(n: int) -> str:
        return str(10**20 + n)  # sequence numbers wider than 64 bits, as Kinesis has

    def rec(n: int) -> bytes:
        return json.dumps(
            {"shardId": "shardId-1", "sequenceNumber": s(n), "partitionKey": "k", "data": f"d{n}"}
        ).encode()

    script = {
        "initialize#1": [[None, None]],
        "processRecords#1": [[s(3), 0], [s(2), 0], [s(4), 0], [s(3), -1], ["abc", 0], [None, None]],
        "processRecords#2": [[s(5), 0], [s(9), 0]],
        "shardEnded#1": [[None, None]],
    }
    (tmp_path / "script.json").write_text(json.dumps(script))
    first, second = [rec(1), rec(2), rec(3)], [rec(5), rec(6), rec(7)]
    run = run_adapter(
        tmp_path,
        [sys.executable, str(CHILDREN / "scripted_child.py")],
        batches_to_bytes([first, second, [shard_end("shardId-1")]]),
        env={"KCL_SCRIPT": str(tmp_path / "script.json")},
    )
    assert run.returncode == 0, run.stderr
    answers = [line.split(" ", 1)[1] for line in run.out_lines if line.startswith("ANSWER ")]
    assert answers == [
        "initialize#1 None None InvalidStateException",
        f"processRecords#1 {s(3)} 0 None",
        f"processRecords#1 {s(2)} 0 IllegalArgumentException",  # below the last checkpoint
        f"processRecords#1 {s(4)} 0 IllegalArgumentException",  # beyond what was delivered
        f"processRecords#1 {s(3)} -1 IllegalArgumentException",
        "processRecords#1 abc 0 IllegalArgumentException",
        "processRecords#1 None None None",  # the largest delivered: s(3)
        f"processRecords#2 {s(5)} 0 None",
        f"processRecords#2 {s(9)} 0 IllegalArgumentException",
        "shardEnded#1 None None None",
    ]


def test_in_process_with_serve(tmp_path, monkeypatch):
    """The adapter as an SDK worker over in-memory streams (the child is still a real process)."""
    import io

    from etlstage_workers.kcl.adapter import KclLoader, Options

    from etlstage.protocol.scenario import Scenario
    from etlstage.worker import serve

    monkeypatch.setenv("KCL_TEST_OUT", str(tmp_path / "out.txt"))
    options = Options(argv=["node", str(CHILDREN / "mld_child.js"), "v2"], checkpoint_db=str(tmp_path / "db.sqlite"))
    out = io.BytesIO()
    scenario = Scenario(type="L", mode="batch", batch_size=2, stage="mem", state_dir=str(tmp_path))
    assert serve(KclLoader(options), stdin=io.BytesIO(b"x\ny\n\x17z\n\x17"), stdout=out, scenario=scenario) == 0
    assert out.getvalue() == b"\x00\x00"
    lines = (tmp_path / "out.txt").read_text().splitlines()
    assert [line.rsplit(" ", 1)[1] for line in lines if line.startswith("RECORD")] == ["x", "y", "z"]
    assert CheckpointStore(str(tmp_path / "db.sqlite"), "mem").get("shardId-000000000000") == (
        "00000000000000000003",
        0,
    )


def test_the_kinesis_extractor_envelope():
    """The exact shape `etlstage-kinesis --envelope` writes (text and base64 data)."""
    text = (
        b'{"data":"{\\"id\\":1}","dataEncoding":"utf8","partitionKey":"k1","sequenceNumber":"4959000000000000001",'
        b'"subSequenceNumber":2,"shardId":"shardId-000000000004","approximateArrivalTimestamp":1716900000123}'
    )
    p = records.classify(text, "default", 1, "here")
    assert not p.synthetic and p.shard_id == "shardId-000000000004"
    assert base64.b64decode(p.record.data_b64) == b'{"id":1}'
    assert p.record.key == (4959000000000000001, 2) and p.record.arrival_ms == 1716900000123
    binary = text.replace(b'"{\\"id\\":1}","dataEncoding":"utf8"', b'"/w==","dataEncoding":"base64"')
    assert base64.b64decode(records.classify(binary, "d", 1, "here").record.data_b64) == b"\xff"


def test_what_the_kinesis_extractor_writes_with_envelope_is_what_the_adapter_reads():
    """The contract end to end: `etlstage-kinesis --envelope`'s own framing, parsed here."""
    from datetime import UTC, datetime

    from etlstage_workers.kinesis import kpl
    from etlstage_workers.kinesis.output import Framer

    from etlstage.protocol import DEFAULT_MARKERS

    arrival = datetime(2024, 5, 28, 12, 40, 0, 123000, tzinfo=UTC)
    aggregated = kpl.aggregate([("inner-a", b"first"), ("inner-b", "zwei \u00fc".encode())])
    kinesis_records = [
        {"SequenceNumber": "4959000000000000001", "PartitionKey": "k1", "Data": b'{"id":1}'},
        {"SequenceNumber": "4959000000000000002", "PartitionKey": "k2", "Data": b"\xff\x00binary"},
        {"SequenceNumber": "4959000000000000003", "PartitionKey": "outer", "Data": aggregated},
    ]
    for r in kinesis_records:
        r["ApproximateArrivalTimestamp"] = arrival
    messages, _ = Framer(DEFAULT_MARKERS, envelope=True).frame("shardId-000000000004", kinesis_records)
    parsed = [records.classify(m, "default", 1, f"message {i}") for i, m in enumerate(messages)]
    assert not any(p.synthetic for p in parsed)
    assert {p.shard_id for p in parsed} == {"shardId-000000000004"}
    got = [
        (p.record.key, p.record.partition_key, base64.b64decode(p.record.data_b64), p.record.arrival_ms) for p in parsed
    ]
    ms = 1716900000123
    assert got == [
        ((4959000000000000001, 0), "k1", b'{"id":1}', ms),
        ((4959000000000000002, 0), "k2", b"\xff\x00binary", ms),
        ((4959000000000000003, 0), "inner-a", b"first", ms),
        ((4959000000000000003, 1), "inner-b", "zwei \u00fc".encode(), ms),
    ]
