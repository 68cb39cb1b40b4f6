"""Pure parts of the Kinesis extractor: KPL, framing, store, backoff, rate limit, shards."""

from __future__ import annotations

import base64
import json
import sqlite3
from datetime import UTC, datetime

import pytest
from botocore.exceptions import ClientError
from etlstage_workers.kinesis import kpl
from etlstage_workers.kinesis.output import Framer
from etlstage_workers.kinesis.retry import Backoff, KinesisGaveUp, RateLimit
from etlstage_workers.kinesis.shards import lineage_order, owner, plan_new
from etlstage_workers.kinesis.store import CheckpointStore, Commit, ShardRow

from etlstage.errors import MarkerInMessage
from etlstage.protocol import DEFAULT_MARKERS, Markers


def rec(seq: str, data: bytes, key: str = "k") -> dict:
    return {
        "SequenceNumber": seq,
        "Data": data,
        "PartitionKey": key,
        "ApproximateArrivalTimestamp": datetime(2024, 1, 1, tzinfo=UTC),
    }


# --- KPL ---------------------------------------------------------------------------------


def test_kpl_round_trip_and_agrees_with_aws_kinesis_agg() -> None:
    pairs = [(f"key{i % 3}", bytes([i]) * (i * 37)) for i in range(50)]
    blob = kpl.aggregate(pairs)
    assert blob[:4] == b"\xf3\x89\x9a\xc2"
    assert [(k, d) for _, k, d in kpl.deaggregate(blob, "outer")] == pairs
    assert [s for s, _, _ in kpl.deaggregate(blob, "outer")] == list(range(50))

    from aws_kinesis_agg.aggregator import RecordAggregator
    from aws_kinesis_agg.deaggregator import iter_deaggregate_records

    agg = RecordAggregator()
    for k, d in pairs:
        assert agg.add_user_record(k, d) is None
    theirs = agg.clear_and_get().get_contents()[2]
    assert [(k, d) for _, k, d in kpl.deaggregate(theirs, "outer")] == pairs
    # and theirs reads ours
    boto3_shaped = {"SequenceNumber": "1", "PartitionKey": "outer", "ApproximateArrivalTimestamp": 0, "Data": blob}
    theirs_read = list(iter_deaggregate_records([boto3_shaped], data_format="Boto3"))
    assert [(r["kinesis"]["partitionKey"], base64.b64decode(r["kinesis"]["data"])) for r in theirs_read] == pairs


def test_kpl_lengths_across_varint_boundaries() -> None:
    sizes = [0, 1, 127, 128, 129, 1000, 16383, 16384, 20000, 300000]
    pairs = [(f"k{i % 4}", bytes((i * 7 + j) % 256 for j in range(n))) for i, n in enumerate(sizes)]
    assert [(k, d) for _, k, d in kpl.deaggregate(kpl.aggregate(pairs), "o")] == pairs
    assert kpl.payloads(kpl.aggregate(pairs)) == [d for _, d in pairs]


def test_kpl_not_aggregated_or_damaged_passes_as_is() -> None:
    assert kpl.deaggregate(b"hello", "pk") == [(0, "pk", b"hello")]
    blob = kpl.aggregate([("a", b"x")])
    bad_md5 = blob[:-1] + bytes([blob[-1] ^ 1])
    assert kpl.deaggregate(bad_md5, "pk") == [(0, "pk", bad_md5)]
    assert kpl.deaggregate(kpl.MAGIC + b"short", "pk") == [(0, "pk", kpl.MAGIC + b"short")]
    import hashlib

    for body in (b"\x1a\xff\xff\x03xx", b"\x0a\x01a\x1a\x04\x08\x05\x1a\x00", b"\x1f"):
        junk = kpl.MAGIC + body + hashlib.md5(body).digest()  # good MD5, bad protobuf
        assert kpl.deaggregate(junk, "pk") == [(0, "pk", junk)]


# --- framing -----------------------------------------------------------------------------


def test_framer_data_and_position() -> None:
    f = Framer(DEFAULT_MARKERS)
    agg = kpl.aggregate([("a", b"s0"), ("b", b"s1"), ("c", b"s2")])
    msgs, pos = f.frame("shardId-1", [rec("7", b"plain"), rec("9", agg)])
    assert msgs == [b"plain", b"s0", b"s1", b"s2"]
    assert (pos.seq, pos.subseq, pos.complete) == ("9", 2, True)


def test_framer_envelope_fields() -> None:
    f = Framer(DEFAULT_MARKERS, envelope=True)
    msgs, _ = f.frame("shardId-1", [rec("7", b"caf\xc3\xa9", "pk"), rec("8", b"\xff\xfe", "pk")])
    a, b = (json.loads(m) for m in msgs)
    assert a == {
        "data": "café",
        "dataEncoding": "utf8",
        "partitionKey": "pk",
        "sequenceNumber": "7",
        "subSequenceNumber": 0,
        "shardId": "shardId-1",
        "approximateArrivalTimestamp": 1704067200000,
    }
    assert b["dataEncoding"] == "base64" and b["data"] == "//4="


def test_framer_skips_sub_records_already_done() -> None:
    f = Framer(DEFAULT_MARKERS)
    agg = kpl.aggregate([("a", b"s0"), ("b", b"s1"), ("c", b"s2")])
    msgs, pos = f.frame("s", [rec("9", agg), rec("10", b"next")], after=(9, 1))
    assert msgs == [b"s2", b"next"] and pos.seq == "10"


@pytest.mark.parametrize("on_marker", ["envelope", "error"])
def test_records_with_marker_bytes_never_desync_nor_vanish(on_marker: str) -> None:
    f = Framer(DEFAULT_MARKERS, on_marker=on_marker)
    records = [
        rec("1", b'{"a": "x",\n "b": [1, 2]}\n'),
        rec("2", b"bin\x00ary\n"),
        rec("3", b"ok"),
        rec("4", b'\t{"t": "tab\\u0017"}\r\n'),
    ]
    msgs, _ = f.frame("s", records)
    assert len(msgs) == 4
    for m in msgs:
        assert not any(b in m for b in (b"\n", b"\x00", b"\x17", b"\x11"))
    assert msgs[0] == b'{"a":"x","b":[1,2]}'
    doc = json.loads(msgs[1])
    assert doc["dataEncoding"] == "base64" and doc["sequenceNumber"] == "2"
    assert (doc.get("error") == "KINESIS_MARKER_IN_DATA") == (on_marker == "error")
    assert msgs[2] == b"ok"
    assert json.loads(msgs[3]) == {"t": "tab\x17"}
    assert f.escaped == 3


def test_marker_policy_fail_names_the_record() -> None:
    f = Framer(DEFAULT_MARKERS, on_marker="fail")
    with pytest.raises(MarkerInMessage, match="record 5/0 of shardId-9"):
        f.frame("shardId-9", [rec("5", b"a\nb")])


def test_printable_marker_that_clashes_with_json_is_a_clear_error() -> None:
    f = Framer(Markers(eom=ord("}")), on_marker="envelope")
    with pytest.raises(MarkerInMessage, match="even its JSON envelope"):
        f.frame("s", [rec("5", b"a}b")])


# --- store -------------------------------------------------------------------------------


def test_store_compares_sequence_numbers_as_integers_and_never_goes_back(tmp_path) -> None:
    st = CheckpointStore(str(tmp_path), "s")
    st.register([ShardRow("sh", [], "TRIM_HORIZON", None, None, None, True, False)])
    big = "49590338271490256608559692538361571095921575989136588898"
    st.commit([Commit("sh", "9", 0, True, False)])
    st.commit([Commit("sh", "10", 0, True, False)])  # "10" < "9" as text
    assert st.rows()["sh"].seq == "10"
    st.commit([Commit("sh", big, 3, True, False)])
    st.commit([Commit("sh", big, 2, True, False)])  # backwards: ignored
    st.commit([Commit("sh", "11", 0, True, True)])  # backwards too, but SHARD_END is recorded
    row = st.rows()["sh"]
    assert (row.seq, row.subseq, row.ended) == (big, 3, True)
    # a second connection (another instance) sees it: WAL file, shared
    other = sqlite3.connect(tmp_path / "kinesis.sqlite")
    assert other.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert other.execute("SELECT ended FROM shards WHERE shard_id='sh'").fetchone() == (1,)


# --- backoff and rate ------------------------------------------------------------------------


def _throttle() -> ClientError:
    return ClientError(
        {"Error": {"Code": "ProvisionedThroughputExceededException", "Message": "slow down"}}, "GetRecords"
    )


def test_backoff_follows_the_rdss_formula_then_gives_up(caplog) -> None:
    sleeps: list[float] = []
    b = Backoff(100, 10, sleep=sleeps.append)
    calls = []

    def always() -> None:
        calls.append(1)
        raise _throttle()

    with pytest.raises(KinesisGaveUp, match="GENERR010"):
        b.call("GetRecords(x)", always)
    assert sleeps == [2**n * 0.1 for n in range(1, 11)]
    assert len(calls) == 11
    assert "[GENERR010]" in caplog.text

    sleeps.clear()
    results = iter([_throttle(), _throttle(), "ok"])

    def twice() -> str:
        r = next(results)
        if isinstance(r, Exception):
            raise r
        return r

    assert b.call("x", twice) == "ok" and sleeps == [0.2, 0.4]


def test_other_errors_are_not_retried() -> None:
    b = Backoff(100, 10, sleep=lambda s: None)
    err = ClientError({"Error": {"Code": "ResourceNotFoundException", "Message": "no"}}, "GetRecords")
    with pytest.raises(ClientError):
        b.call("x", lambda: (_ for _ in ()).throw(err))


def test_rate_limit_never_more_than_five_per_second() -> None:
    now = [0.0]
    r = RateLimit(5, clock=lambda: now[0], sleep=lambda s: now.__setitem__(0, now[0] + s))
    stamps = []
    for _ in range(23):
        r.wait()
        stamps.append(now[0])
    for i in range(len(stamps) - 5):
        assert stamps[i + 5] - stamps[i] >= 1.0 - 1e-9


# --- shards ---------------------------------------------------------------------------------


def shard(sid: str, parent: str | None = None, adjacent: str | None = None, closed: bool = False) -> dict:
    s: dict = {"ShardId": sid, "SequenceNumberRange": {"StartingSequenceNumber": "1"}}
    if parent:
        s["ParentShardId"] = parent
    if adjacent:
        s["AdjacentParentShardId"] = adjacent
    if closed:
        s["SequenceNumberRange"]["EndingSequenceNumber"] = "9"
    return s


def test_lineage_order_and_start_policy() -> None:
    listing = [shard("c", "a", "b"), shard("a", closed=True), shard("b", closed=True), shard("d")]
    assert [s["ShardId"] for s in lineage_order(listing)] == ["a", "b", "c", "d"]
    rows = {r.shard_id: r for r in plan_new(listing, {}, "LATEST", None)}
    assert rows["a"].start_type == "SKIP" and rows["a"].ended
    assert rows["c"].start_type == "LATEST" and rows["c"].parents == ["a", "b"]
    later = plan_new([*listing, shard("e", "c"), shard("f")], rows, "LATEST", None)
    assert [(r.shard_id, r.start_type) for r in later] == [("e", "TRIM_HORIZON"), ("f", "LATEST")]
    ts_rows = plan_new(listing, {}, "AT_TIMESTAMP", 123.0)
    assert {r.start_type for r in ts_rows} == {"AT_TIMESTAMP"}


def test_owner_is_stable_and_covers_all_instances() -> None:
    ids = [f"shardId-{i:012d}" for i in range(64)]
    assert [owner(s, 3) for s in ids[:6]] == [0, 1, 2, 0, 1, 2]
    assert {owner(f"custom-{i}", 3) for i in range(30)} == {0, 1, 2}
    # Instances are separate processes (and restarts): each must compute the same owner from
    # the shard id alone, so the assignments are pinned, not compared within one process.
    assert [owner(f"custom-{i}", 3) for i in range(12)] == [0, 2, 2, 1, 1, 1, 2, 0, 1, 1, 2, 0]
    pinned = {"shardId-000000000007": 3, "shardId-000000000010": 2, "orders-a": 2, "orders-b": 0}
    assert {s: owner(s, 4) for s in pinned} == pinned
    assert all(owner(s, 1) == 0 for s in ids + ["custom-1"])
