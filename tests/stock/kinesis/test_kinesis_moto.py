"""The Kinesis extractor against moto's server on loopback: in-process (serve) and as a subprocess."""

from __future__ import annotations

import io
import json
import sqlite3
import time
from collections import defaultdict

import pytest
from etlstage_workers.kinesis import kpl
from etlstage_workers.kinesis.client import KinesisApi
from etlstage_workers.kinesis.extractor import KinesisExtractor
from etlstage_workers.kinesis.options import Options
from etlstage_workers.kinesis.retry import Backoff, KinesisGaveUp

from etlstage.protocol import Scenario
from etlstage.worker import serve


def records(n: int, keys: int = 5, prefix: str = "r") -> list[tuple[str, bytes]]:
    docs = ({"id": f"{prefix}{i}", "key": f"k{i % keys}", "n": i} for i in range(n))
    return [(d["key"], json.dumps(d).encode()) for d in docs]


def run_plain(opts: Options, state_dir: str = "", **scenario: object) -> list[bytes]:
    out = io.BytesIO()
    serve(
        KinesisExtractor(opts),
        stdin=io.BytesIO(),
        stdout=out,
        scenario=Scenario(type="E", mode="plain", state_dir=state_dir, **scenario),
    )
    body = out.getvalue()
    return body.split(b"\n")[:-1] if body else []


def opts(stream: str, url: str, **kw: object) -> Options:
    kw.setdefault("idle_sleep", 0)
    return Options(stream=stream, endpoint_url=url, region="us-east-1", **kw)  # type: ignore[arg-type]


def ids(messages: list[bytes]) -> list[str]:
    return [json.loads(m)["id"] for m in messages]


def assert_key_order(messages: list[bytes]) -> None:
    last: dict[str, int] = defaultdict(lambda: -1)
    for m in messages:
        doc = json.loads(m)
        assert doc["n"] > last[doc["key"]], f"{doc} after n={last[doc['key']]}"
        last[doc["key"]] = doc["n"]


@pytest.mark.parametrize("parallel", [1, 4])
def test_plain_reads_every_shard_once_in_key_order_and_commits_nothing(
    emulator, stream, put_records, tmp_path, parallel
) -> None:
    s = stream(4)
    put_records(s, records(300))
    got = run_plain(opts(s, emulator.endpoint_url, limit=37, parallel=parallel), str(tmp_path))
    assert sorted(ids(got)) == sorted(f"r{i}" for i in range(300))
    assert_key_order(got)
    rows = sqlite3.connect(tmp_path / "kinesis.sqlite").execute("SELECT seq, ended FROM shards").fetchall()
    assert rows == [(None, 0)] * 4
    lags = sqlite3.connect(tmp_path / "kinesis.sqlite").execute("SELECT millis_behind_latest FROM lag").fetchall()
    assert len(lags) == 4


def test_list_shards_follows_next_token(emulator, stream) -> None:
    s = stream(5)
    api = KinesisApi(emulator.client(), s, Backoff())
    assert sorted(x["ShardId"] for x in api.list_shards(page_size=2)) == [f"shardId-{i:012d}" for i in range(5)]


def test_stream_arn_works_too(emulator, stream, put_records) -> None:
    s = stream(2)
    put_records(s, records(20))
    arn = emulator.client().describe_stream_summary(StreamName=s)["StreamDescriptionSummary"]["StreamARN"]
    got = run_plain(Options(stream=arn, endpoint_url=emulator.endpoint_url, idle_sleep=0))
    assert sorted(ids(got)) == sorted(f"r{i}" for i in range(20))


def test_cyclic_subprocess_commits_only_on_the_next_request_and_resumes_after_sigkill(
    emulator, stream, put_records, spawn, tmp_path
) -> None:
    s = stream(1)
    put_records(s, records(30, keys=1))
    args = [
        "--stream",
        s,
        "--endpoint-url",
        emulator.endpoint_url,
        "--region",
        "us-east-1",
        "--max-records-per-cycle",
        "5",
        "--idle-sleep",
        "0",
    ]
    w = spawn(args, str(tmp_path))
    assert ids(w.cycle()) == [f"r{i}" for i in range(0, 5)]
    assert ids(w.cycle()) == [f"r{i}" for i in range(5, 10)]  # this request committed r0..r4
    w.kill()  # r5..r9 were never acknowledged

    db = sqlite3.connect(tmp_path / "kinesis.sqlite")
    (seq,) = db.execute("SELECT seq FROM shards").fetchone()
    c = emulator.client()
    it = c.get_shard_iterator(StreamName=s, ShardId="shardId-000000000000", ShardIteratorType="TRIM_HORIZON")
    seqs = [r["SequenceNumber"] for r in c.get_records(ShardIterator=it["ShardIterator"])["Records"]]
    assert seq == seqs[4]

    w = spawn(args, str(tmp_path))
    assert ids(w.cycle()) == [f"r{i}" for i in range(5, 10)]  # replayed, nothing lost
    got = []
    for _ in range(4):
        got += ids(w.cycle())
    assert got == [f"r{i}" for i in range(10, 30)]
    # stdin EOF: the last window (r25..r29) is not committed
    assert w.close_stdin() == 0
    (seq,) = db.execute("SELECT seq FROM shards").fetchone()
    assert seq == seqs[24]
    w = spawn(args, str(tmp_path))
    assert ids(w.cycle()) == [f"r{i}" for i in range(25, 30)]
    assert w.cycle() == []
    (seq,) = db.execute("SELECT seq FROM shards").fetchone()
    assert seq == seqs[29]


def test_latest_reads_only_new_records_and_a_restart_before_any_commit_loses_none(
    emulator, stream, put_records, spawn, tmp_path
) -> None:
    s = stream(2)
    put_records(s, records(10, prefix="old"))
    # A restart before any checkpoint resumes AT_TIMESTAMP of the first start; the old records
    # must be older than that at the emulator's resolution (moto compares whole seconds).
    time.sleep(1.1)
    args = [
        "--stream",
        s,
        "--endpoint-url",
        emulator.endpoint_url,
        "--region",
        "us-east-1",
        "--initial-position",
        "LATEST",
        "--idle-sleep",
        "0",
    ]
    w = spawn(args, str(tmp_path))
    assert w.cycle() == []  # iterators at the tip now
    time.sleep(0.05)
    put_records(s, records(10, prefix="new"))
    got = ids(w.cycle())
    assert sorted(got) == sorted(f"new{i}" for i in range(10))
    w.kill()  # the window holding new* was never acknowledged, and no checkpoint exists yet
    w = spawn(args, str(tmp_path))
    again = ids(w.cycle())
    assert sorted(again) == sorted(f"new{i}" for i in range(10))


def test_at_timestamp(emulator, stream, put_records) -> None:
    s = stream(2)
    put_records(s, records(10, prefix="before"))
    time.sleep(1.2)
    ts = time.time()
    time.sleep(0.1)
    put_records(s, records(10, prefix="after"))
    got = run_plain(opts(s, emulator.endpoint_url, initial_position="AT_TIMESTAMP", timestamp=ts))
    assert sorted(ids(got)) == sorted(f"after{i}" for i in range(10))


def test_throttling_is_retried_with_backoff(emulator, stream, put_records, proxy) -> None:
    s = stream(2)
    put_records(s, records(40))
    proxy.fail = 3
    got = run_plain(opts(s, proxy.endpoint_url, backoff_base_ms=1))
    assert sorted(ids(got)) == sorted(f"r{i}" for i in range(40))
    assert proxy.failed == 3


def test_throttling_without_end_fails_clearly(emulator, stream, put_records, proxy) -> None:
    s = stream(1)
    put_records(s, records(3))
    proxy.fail = 10**6
    proxy.error = "LimitExceededException"
    with pytest.raises(KinesisGaveUp, match=r"GENERR010.*GetRecords.*LimitExceededException"):
        run_plain(opts(s, proxy.endpoint_url, backoff_base_ms=1, max_retries=4))
    assert proxy.failed == 5


def test_expired_iterator_gets_a_fresh_one_from_the_last_position(emulator, stream, put_records, proxy) -> None:
    s = stream(1)
    put_records(s, records(20, keys=1))
    proxy.error = "ExpiredIteratorException"
    proxy.fail_at = {3}
    got = run_plain(opts(s, proxy.endpoint_url, limit=4))
    assert ids(got) == [f"r{i}" for i in range(20)]
    assert proxy.failed == 1


def test_never_more_than_five_get_records_per_second_per_shard(emulator, stream, proxy, tmp_path) -> None:
    s = stream(1)
    n = 16
    out = io.BytesIO()
    serve(
        KinesisExtractor(opts(s, proxy.endpoint_url)),
        stdin=io.BytesIO(b"\n" * n),
        stdout=out,
        scenario=Scenario(type="E", mode="cyclic", state_dir=str(tmp_path)),
    )
    calls = proxy.get_records_calls
    assert len(calls) >= n  # each empty cycle waited for a round of its own; reading ahead polls on
    for i in range(len(calls) - 5):
        # stamped on arrival at the proxy: request jitter under load shortens a 1.0 s gap a little
        # (no limit: milliseconds; a limit of 6/s: 0.83 s)
        assert calls[i + 5] - calls[i] >= 0.9, calls


def test_kpl_aggregated_input_is_deaggregated_with_sub_sequence_checkpoints(emulator, stream, tmp_path) -> None:
    s = stream(1)
    c = emulator.client()
    c.put_record(StreamName=s, PartitionKey="outer", Data=b"plain-before")
    c.put_record(StreamName=s, PartitionKey="outer", Data=kpl.aggregate([(f"u{i}", b"sub%d" % i) for i in range(7)]))
    out = io.BytesIO()
    serve(
        KinesisExtractor(opts(s, emulator.endpoint_url, envelope=True)),
        stdin=io.BytesIO(b"\n\n"),
        stdout=out,
        scenario=Scenario(type="E", mode="cyclic", state_dir=str(tmp_path)),
    )
    docs = [json.loads(m) for m in out.getvalue().split(b"\x00")[0].split(b"\n")[:-1]]
    assert [d["data"] for d in docs] == ["plain-before"] + [f"sub{i}" for i in range(7)]
    assert [d["subSequenceNumber"] for d in docs] == [0, *range(7)]
    assert [d["partitionKey"] for d in docs[1:]] == [f"u{i}" for i in range(7)]
    row = sqlite3.connect(tmp_path / "kinesis.sqlite").execute("SELECT seq, subseq, complete FROM shards").fetchone()
    assert row == (docs[-1]["sequenceNumber"], 6, 1)


def test_marker_bytes_inside_records_through_a_real_subprocess(emulator, stream, put_records, spawn, tmp_path) -> None:
    s = stream(1)
    data = [b'{"id": "j1",\n "x": "a\\u0000b"}\n', b"raw\x00bytes\x17\x11\n", b'{"id":"j2"}']
    put_records(s, [("k", d) for d in data])
    w = spawn(
        ["--stream", s, "--endpoint-url", emulator.endpoint_url, "--region", "us-east-1", "--idle-sleep", "0"],
        str(tmp_path),
    )
    got = w.cycle()
    assert len(got) == 3
    assert got[0] == b'{"id":"j1","x":"a\\u0000b"}'
    env = json.loads(got[1])
    assert env["dataEncoding"] == "base64" and env["partitionKey"] == "k"
    import base64

    assert base64.b64decode(env["data"]) == data[1]
    assert got[2] == data[2]
    assert w.cycle() == []
    assert "holds a marker byte" in w.stderr()


def test_instances_read_disjoint_shards_that_cover_the_stream(emulator, stream, put_records, tmp_path) -> None:
    s = stream(6)
    put_records(s, records(120))
    per_instance = [
        set(ids(run_plain(opts(s, emulator.endpoint_url), str(tmp_path), instance=i, instances=3))) for i in range(3)
    ]
    assert sum(len(x) for x in per_instance) == 120
    assert set().union(*per_instance) == {f"r{i}" for i in range(120)}
    assert sum(1 for x in per_instance if x) >= 2


def test_bad_options_are_reported_clearly(emulator, stream, spawn, tmp_path) -> None:
    s = stream(1)
    w = spawn(
        [
            "--stream",
            s,
            "--endpoint-url",
            emulator.endpoint_url,
            "--region",
            "us-east-1",
            "--initial-position",
            "AT_TIMESTAMP",
        ],
        str(tmp_path),
    )
    assert w.close_stdin() == 2
    assert "AT_TIMESTAMP needs --timestamp" in w.stderr()
    w = spawn(
        ["--stream", "no-such-stream", "--endpoint-url", emulator.endpoint_url, "--region", "us-east-1"], str(tmp_path)
    )
    assert w.close_stdin() != 0
    assert "no-such-stream" in w.stderr()


def test_a_shard_gone_past_retention_is_ended_not_a_crash_loop(
    emulator, stream, put_records, proxy, tmp_path, caplog
) -> None:
    s = stream(2)
    put_records(s, records(20))
    state = str(tmp_path)
    sc = Scenario(type="E", mode="cyclic", state_dir=state)
    serve(KinesisExtractor(opts(s, proxy.endpoint_url)), stdin=io.BytesIO(b"\n\n"), stdout=io.BytesIO(), scenario=sc)
    put_records(s, records(20, prefix="second"))
    proxy.hide_shard = "shardId-000000000001"
    out = io.BytesIO()
    serve(KinesisExtractor(opts(s, proxy.endpoint_url)), stdin=io.BytesIO(b"\n\n"), stdout=out, scenario=sc)
    got = ids([m for m in out.getvalue().replace(b"\x00", b"").split(b"\n") if m])
    shard0 = {d["id"] for d in (json.loads(r["Data"]) for r in _shard_records(emulator, s, "shardId-000000000000"))}
    assert set(got) == {i for i in shard0 if i.startswith("second")}
    assert "shardId-000000000001 no longer exists" in caplog.text
    ended = dict(sqlite3.connect(tmp_path / "kinesis.sqlite").execute("SELECT shard_id, ended FROM shards"))
    assert ended == {"shardId-000000000000": 0, "shardId-000000000001": 1}


def _shard_records(emulator, stream: str, shard: str) -> list[dict]:
    c = emulator.client()
    it = c.get_shard_iterator(StreamName=stream, ShardId=shard, ShardIteratorType="TRIM_HORIZON")["ShardIterator"]
    return c.get_records(ShardIterator=it)["Records"]
