"""The Kinesis extractor as a native Spark source: real PySpark (local[2]) against moto's server
(and kinesis-local for resharding, which moto does not end shards for)."""

from __future__ import annotations

import base64
import json
import time
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from etlstage_workers.kinesis import kpl
from etlstage_workers.kinesis.options import build_parser, options_from_args
from etlstage_workers.kinesis.spark_offsets import Reached, ReachedLog
from etlstage_workers.kinesis.spark_source import has_new, native_source, settings_from

from etlstage.config.loader import parse_config
from etlstage.config.model import StageConfig
from etlstage.errors import ConfigError
from etlstage.native import NativeContext
from etlstage.protocol.markers import DEFAULT_MARKERS
from etlstage.protocol.vocabulary import Mode, StageType
from etlstage.spark.checkpoint import committed_offsets

from . import test_kinesis_reshard as reshard
from .test_kinesis_moto import run_plain

EXTRACT = StageConfig(
    name="extract", type=StageType.E, command=["etlstage-kinesis"], mode=Mode.CYCLIC, markers=DEFAULT_MARKERS
)


def context(
    argv: list[str], checkpoint: str, stage: StageConfig = EXTRACT, env: dict[str, str] | None = None
) -> NativeContext:
    """The context the engine gives the source, built as a native stage's own tests build it."""
    return NativeContext(stage=stage, argv=argv, checkpoint=checkpoint, env=env or {}, once=True)


kinesis_mock = reshard.kinesis_mock  # kinesis-local on loopback: a mock that closes split and merged shards


def args(stream: str, url: str, *more: str) -> list[str]:
    return ["--stream", stream, "--endpoint-url", url, "--region", "us-east-1", *more]


def run(spark: Any, ctx: NativeContext, root: Path, timeout: float = 120) -> dict[int, list[bytes]]:
    """One available-now run with the checkpoint under ``root``: the rows of each micro-batch."""
    batches: dict[int, list[bytes]] = {}

    def collect(df: Any, batch_id: int) -> None:
        batches[batch_id] = [bytes(r.value) for r in df.collect()]

    query = (
        native_source(spark, ctx)
        .writeStream.foreachBatch(collect)
        .option("checkpointLocation", str(root / "query"))
        .trigger(availableNow=True)
        .start()
    )
    try:
        assert query.awaitTermination(timeout), "the available-now query did not end"
    finally:
        query.stop()
    assert query.exception() is None
    return batches


def ctx_for(root: Path, argv: list[str]) -> NativeContext:
    return context(argv=argv, checkpoint=str(root / "query" / "stage-extract"))


def shard_contents(emulator: Any, stream: str) -> dict[str, list[dict[str, Any]]]:
    """Every record of every shard, in order, read directly."""
    client = emulator.client()
    out = {}
    for shard in client.list_shards(StreamName=stream)["Shards"]:
        sid = shard["ShardId"]
        it = client.get_shard_iterator(StreamName=stream, ShardId=sid, ShardIteratorType="TRIM_HORIZON")
        reply = client.get_records(ShardIterator=it["ShardIterator"], Limit=10000)
        out[sid] = reply["Records"]
    return dict(sorted(out.items()))


def data(n: int, prefix: str = "r") -> list[tuple[str, bytes]]:
    return [(f"k{i % 7}", json.dumps({"id": f"{prefix}{i}"}).encode()) for i in range(n)]


def concat(values: list[list[bytes]]) -> list[bytes]:
    return [v for vs in values for v in vs]


# --- options ------------------------------------------------------------------------------


def test_options_mean_what_they_mean_for_the_worker(tmp_path) -> None:
    argv = args("s", "http://127.0.0.1:1", "--envelope", "--limit", "7", "--max-records-per-cycle", "9")
    settings = settings_from(ctx_for(tmp_path, argv))
    assert settings.options == options_from_args(build_parser().parse_args(argv))
    assert settings.stage == "extract"


@pytest.mark.parametrize(
    ("given", "named"),
    [
        (["--limit", "0"], "--limit 0"),
        (["--initial-position", "NOW"], "NOW"),
        (["--bogus"], "--bogus"),
        (["--help"], "--help"),
    ],
)
def test_bad_options_name_the_stage_and_the_option(tmp_path, given, named) -> None:
    with pytest.raises(ConfigError) as err:
        settings_from(ctx_for(tmp_path, args("s", "http://127.0.0.1:1", *given)))
    assert "stage 'extract'" in str(err.value)
    assert named in str(err.value)


@pytest.mark.parametrize(
    "given",
    [
        ["--parallel", "2"],
        ["--paral", "2"],  # an abbreviation is the same option
        ["--no-read-ahead"],
        ["--max-cycle-seconds", "3"],
        ["--log-format", "json"],
    ],
)
def test_options_only_the_worker_needs_are_ignored_so_one_file_runs_on_both_engines(tmp_path, given, caplog) -> None:
    plain = settings_from(ctx_for(tmp_path, args("s", "http://127.0.0.1:1")))
    with caplog.at_level("INFO"):
        settings = settings_from(ctx_for(tmp_path, args("s", "http://127.0.0.1:1", *given)))
    assert settings.options.stream == plain.options.stream and settings.options.limit == plain.options.limit
    assert "ignored under the Spark engine" in caplog.text and "stage 'extract'" in caplog.text


def test_the_stream_may_come_from_the_stage_environment(tmp_path) -> None:
    ctx = context(
        argv=["--endpoint-url", "http://127.0.0.1:1"],
        checkpoint=str(tmp_path),
        env={"ETLSTAGE_KINESIS_STREAM": "from-env", "AWS_REGION": "eu-west-1"},
    )
    settings = settings_from(ctx)
    assert (settings.options.stream, settings.options.region) == ("from-env", "eu-west-1")


STAGES = """
stages:
  - name: orders
    type: E
    mode: cyclic
    offsets: worker
    command: [etlstage-kinesis, --stream, orders, --region, eu-west-1, --max-records-per-cycle, "300"]
    markers: {eom: 0x1e}
  - name: load
    type: L
    command: [etlstage-spark-load, --columns, "id=/id", --output, /tmp/out]
"""


def test_a_stage_as_stages_yaml_loads_it(tmp_path) -> None:
    config = parse_config(STAGES)
    extract, load = config.stage("orders"), config.stage("load")
    settings = settings_from(context(argv=list(extract.command[1:]), checkpoint=str(tmp_path), stage=extract))
    assert (settings.stage, settings.options.max_records_per_cycle, settings.markers.eom) == ("orders", 300, 0x1E)
    with pytest.raises(ConfigError, match="stage 'load'.*E stage"):
        settings_from(context(argv=["--stream", "x"], checkpoint=str(tmp_path), stage=load))


def test_a_position_is_recorded_once_whatever_a_second_attempt_reached(tmp_path) -> None:
    log = ReachedLog(str(tmp_path))
    first = Reached("5", 0, True, False, False, 3)
    assert log.load(4, "shardId-000000000001") is None
    assert log.record(4, "shardId-000000000001", first) == first
    assert log.record(4, "shardId-000000000001", Reached("9", 0, True, False, True, 5)) == first
    assert log.load(4, "shardId-000000000001") == first
    log.record(5, "shardId-000000000001", first)
    log.forget_before(5)
    assert (log.load(4, "shardId-000000000001"), log.load(5, "shardId-000000000001")) == (None, first)


def test_no_secret_reaches_the_source_options(tmp_path) -> None:
    secret, token = "wJalrXUtnFEMI-test-secret-never-passed", "IQoJb3JpZ2luX2VjE-test-token-never-passed"
    env = {"AWS_SECRET_ACCESS_KEY": secret, "AWS_SESSION_TOKEN": token, "AWS_ACCESS_KEY_ID": "AKIATEST"}
    ctx = context(argv=args("s", "http://127.0.0.1:1"), checkpoint=str(tmp_path), env=env)
    passed = json.dumps(settings_from(ctx).to_options())
    assert secret not in passed and token not in passed and "AKIATEST" not in passed


# --- micro-batches --------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_two_shards_every_record_once_in_shard_order_as_the_worker_emits(
    spark, emulator, stream, put_records, tmp_path
) -> None:
    s = stream(2)
    put_records(s, data(40))
    argv = args(s, emulator.endpoint_url, "--envelope")
    batches = run(spark, ctx_for(tmp_path, argv), tmp_path)

    contents = shard_contents(emulator, s)
    assert all(len(records) > 5 for records in contents.values())  # both shards hold records
    worker = run_plain(options_from_args(build_parser().parse_args(argv)))
    by_shard = {sid: [m for m in worker if json.loads(m)["shardId"] == sid] for sid in contents}
    assert [[json.loads(m)["sequenceNumber"] for m in ms] for ms in by_shard.values()] == [
        [r["SequenceNumber"] for r in records] for records in contents.values()
    ]
    assert batches == {0: concat(list(by_shard.values()))}


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_a_restart_with_the_same_checkpoint_reads_only_the_new_records(
    spark, emulator, stream, put_records, tmp_path
) -> None:
    s = stream(2)
    put_records(s, data(10, "a"))
    ctx = ctx_for(tmp_path, args(s, emulator.endpoint_url))
    first = run(spark, ctx, tmp_path)
    before = shard_contents(emulator, s)
    assert first == {0: concat([[r["Data"] for r in rs] for rs in before.values()])}
    # what the engine asks before starting Spark for a --once run: the source's own planning round
    assert not has_new(ctx, last_committed(tmp_path))

    put_records(s, data(6, "b"))
    assert has_new(ctx, last_committed(tmp_path))
    after = shard_contents(emulator, s)
    second = run(spark, ctx, tmp_path)
    assert second == {1: concat([[r["Data"] for r in after[sid][len(before[sid]) :]] for sid in after])}
    assert sorted(json.loads(v)["id"] for v in second[1]) == sorted(f"b{i}" for i in range(6))

    assert not has_new(ctx, last_committed(tmp_path))
    assert run(spark, ctx, tmp_path) == {}  # nothing new: no batch at all


def last_committed(root: Path) -> dict[str, Any]:
    """The source's offset of the query's last committed micro-batch, as the engine reads it."""
    lines = committed_offsets(root / "query")
    assert lines is not None and len(lines) == 1
    return dict(json.loads(lines[0]))


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_a_new_checkpoint_goes_on_from_the_positions_the_worker_keeps(
    spark, emulator, stream, put_records, tmp_path
) -> None:
    """One state with the worker: committed batches write their positions to the stage's
    kinesis.sqlite, and a query without a checkpoint (the supervisor engine ran last) starts there."""
    from etlstage_workers.kinesis.client import stream_key
    from etlstage_workers.kinesis.store import CheckpointStore

    s = stream(2)
    put_records(s, data(10, "a"))
    state = tmp_path / "state"
    first = run(spark, replace(ctx_for(tmp_path / "one", args(s, emulator.endpoint_url)), state_dir=str(state)),
                tmp_path / "one")  # fmt: skip
    assert len(concat(list(first.values()))) == 10
    store = CheckpointStore(str(state), stream_key(s))
    ends = {sid: r.seq for sid, r in store.rows().items() if r.seq is not None}
    store.close()
    assert ends == {sid: rs[-1]["SequenceNumber"] for sid, rs in shard_contents(emulator, s).items() if rs}

    put_records(s, data(6, "b"))
    second = run(spark, replace(ctx_for(tmp_path / "two", args(s, emulator.endpoint_url)), state_dir=str(state)),
                 tmp_path / "two")  # fmt: skip
    assert sorted(json.loads(v)["id"] for v in concat(list(second.values()))) == sorted(f"b{i}" for i in range(6))


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_kpl_aggregates_are_deaggregated_and_a_limit_may_cut_inside_one(
    spark, emulator, stream, put_records, tmp_path
) -> None:
    s = stream(1)
    agg1 = kpl.aggregate([("a", b"a0"), ("b", b"a1"), ("c", b"a2")])
    agg2 = kpl.aggregate([("d", b"b0"), ("e", b"b1"), ("f", b"b2")])
    put_records(s, [("x", agg1), ("y", agg2), ("z", b"plain")])

    whole = run(spark, ctx_for(tmp_path / "whole", args(s, emulator.endpoint_url)), tmp_path / "whole")
    assert whole == {0: [b"a0", b"a1", b"a2", b"b0", b"b1", b"b2", b"plain"]}

    argv = args(s, emulator.endpoint_url, "--max-records-per-cycle", "2")
    cut = run(spark, ctx_for(tmp_path / "cut", argv), tmp_path / "cut")
    assert cut == {0: [b"a0", b"a1"], 1: [b"a2", b"b0"], 2: [b"b1", b"b2"], 3: [b"plain"]}

    kept = run(spark, ctx_for(tmp_path / "kept", [*argv, "--no-deaggregate"]), tmp_path / "kept")
    # aggregates passed on whole hold newline bytes: base64 envelopes, as the worker sends them
    worker = run_plain(options_from_args(build_parser().parse_args([*argv, "--no-deaggregate"])))
    assert [base64.b64decode(json.loads(m)["data"]) for m in worker[:2]] == [agg1, agg2]
    assert kept == {0: worker[:2], 1: [b"plain"]}


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_the_record_limit_holds_for_each_micro_batch_in_all_shared_by_the_shards(
    spark, emulator, stream, put_records, tmp_path
) -> None:
    """--max-records-per-cycle means what it means to the worker: the records of a window (a
    micro-batch) in all, split evenly among the shards read — not that many per shard."""
    s = stream(2)
    put_records(s, data(25))
    batches = run(
        spark, ctx_for(tmp_path, args(s, emulator.endpoint_url, "--envelope", "--max-records-per-cycle", "4")), tmp_path
    )

    contents = shard_contents(emulator, s)
    assert sorted(batches) == list(range(len(batches)))
    assert all(0 < len(rows) <= 4 for rows in batches.values() if rows), {b: len(r) for b, r in batches.items()}
    per_batch = [Counter(json.loads(m)["shardId"] for m in rows) for rows in batches.values()]
    assert all(max(n.values()) <= 2 for n in per_batch if len(n) == 2), per_batch  # both shards read: 2 each
    for sid, records in contents.items():
        assert sum(n[sid] for n in per_batch) == len(records)
    seqs = {
        sid: [
            json.loads(m)["sequenceNumber"] for m in concat(list(batches.values())) if json.loads(m)["shardId"] == sid
        ]
        for sid in contents
    }
    assert seqs == {sid: [r["SequenceNumber"] for r in records] for sid, records in contents.items()}


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_a_replayed_batch_reads_exactly_what_it_read_the_first_time(
    spark, emulator, stream, put_records, tmp_path
) -> None:
    s = stream(1)
    put_records(s, data(3, "a"))
    ctx = ctx_for(tmp_path, args(s, emulator.endpoint_url, "--max-records-per-cycle", "5"))
    first = run(spark, ctx, tmp_path)
    assert [json.loads(v)["id"] for v in first[0]] == ["a0", "a1", "a2"]

    put_records(s, data(4, "b"))  # a batch read again without its recorded end would take a0..a2, b0, b1
    forget_commit(tmp_path, 0)
    again = run(spark, ctx, tmp_path)
    assert again == {0: first[0], 1: [v for _, v in data(4, "b")]}
    assert not (Path(ctx.checkpoint) / "kinesis-reached" / "0").exists()  # forgotten once batch 1 committed


def forget_commit(root: Path, batch: int) -> None:
    """As if the query died after the batch's tasks but before its commit was logged."""
    commit = root / "query" / "commits" / str(batch)
    assert commit.exists()
    commit.unlink()
    commit.with_name(f".{batch}.crc").unlink(missing_ok=True)


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_a_replayed_batch_that_began_inside_an_aggregate_ends_where_it_ended(
    spark, emulator, stream, put_records, tmp_path
) -> None:
    s = stream(1)
    agg = kpl.aggregate([("a", b"a0"), ("b", b"a1"), ("c", b"a2")])
    put_records(s, [("x", agg)])
    ctx = ctx_for(tmp_path, args(s, emulator.endpoint_url, "--max-records-per-cycle", "2"))
    first = run(spark, ctx, tmp_path)
    assert first == {0: [b"a0", b"a1"], 1: [b"a2"]}  # batch 1 began at sub-record 2 and caught up

    put_records(s, [("z", b"p1"), ("z", b"p2")])  # batch 1 read again by its limit alone would take a2, p1
    forget_commit(tmp_path, 1)
    again = run(spark, ctx, tmp_path)
    assert again == {1: [b"a2"], 2: [b"p1", b"p2"]}


def test_the_entry_point_names_the_factory() -> None:
    from importlib.metadata import entry_points

    found = [ep for ep in entry_points(group="etlstage.spark.sources") if ep.name == "etlstage-kinesis"]
    assert [ep.load() for ep in found] == [native_source]


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_after_a_split_and_a_merge_children_are_read_after_their_parents(spark, kinesis_mock, tmp_path) -> None:
    url, client = kinesis_mock
    s = "spark-reshard"
    client.create_stream(StreamName=s, ShardCount=1)
    reshard._wait_active(client, s)
    writer = reshard.Writer(client, s, per_phase=30, keys=5)
    writer.run()  # 30 records, split, 30 more, merge, 30 more (here, not in a thread)
    assert writer.error is None

    batches = run(spark, ctx_for(tmp_path, args(s, url)), tmp_path, timeout=200)
    docs = [json.loads(v) for rows in batches.values() for v in rows]
    assert sorted((d["key"], d["n"]) for d in docs) == sorted(writer.written)  # each record once
    for key in {d["key"] for d in docs}:
        ns = [d["n"] for d in docs if d["key"] == key]
        assert ns == sorted(ns), key
    phases = [[d["n"] // 30 for d in map(json.loads, rows)] for _, rows in sorted(batches.items())]
    assert [p for ps in phases for p in ps] == sorted(p for ps in phases for p in ps)  # parents' batches first
    assert all(len(set(ps)) == 1 for ps in phases)  # a batch never mixes a parent with its children


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_latest_starts_at_the_first_run_and_a_restart_keeps_that_start(
    spark, emulator, stream, put_records, tmp_path
) -> None:
    s = stream(2)
    put_records(s, data(5, "old"))
    ctx = ctx_for(tmp_path, args(s, emulator.endpoint_url, "--initial-position", "LATEST"))
    assert run(spark, ctx, tmp_path) == {0: []}  # a batch with no rows: the start time is in the offset log
    put_records(s, data(5, "new"))
    got = run(spark, ctx, tmp_path)
    assert sorted(got) == [1]
    assert sorted(json.loads(v)["id"] for v in got[1]) == [f"new{i}" for i in range(5)]


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_throttled_calls_back_off_and_nothing_is_lost(spark, emulator, stream, put_records, proxy, tmp_path) -> None:
    s = stream(1)
    put_records(s, data(12))
    proxy.fail_at = {1, 2, 4}  # the driver's first look, its first retry, the task's first GetRecords
    argv = args(s, proxy.endpoint_url, "--backoff-base-ms", "1", "--max-records-per-cycle", "5")
    batches = run(spark, ctx_for(tmp_path, argv), tmp_path)
    assert proxy.failed == 3
    assert concat([batches[b] for b in sorted(batches)]) == [v for _, v in data(12)]
    assert [len(batches[b]) for b in sorted(batches)] == [5, 5, 2]


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_a_running_query_reads_records_as_they_come(spark, emulator, stream, put_records, tmp_path) -> None:
    s = stream(2)
    ctx = replace(ctx_for(tmp_path, args(s, emulator.endpoint_url, "--idle-sleep", "0.1")), once=False)
    rows: list[bytes] = []

    def collect(df: Any, batch_id: int) -> None:
        rows.extend(bytes(r.value) for r in df.collect())

    query = (
        native_source(spark, ctx)
        .writeStream.foreachBatch(collect)
        .option("checkpointLocation", str(tmp_path / "query"))
        .trigger(processingTime="0.2 seconds")
        .start()
    )
    try:
        for wave in ("a", "b"):
            put_records(s, data(6, wave))
            deadline = time.monotonic() + 60
            while sum(json.loads(v)["id"].startswith(wave) for v in rows) < 6:
                assert query.exception() is None
                assert time.monotonic() < deadline, f"wave {wave}: {len(rows)} rows so far"
                time.sleep(0.1)
    finally:
        query.stop()
    assert sorted(json.loads(v)["id"] for v in rows) == sorted(
        [f"a{i}" for i in range(6)] + [f"b{i}" for i in range(6)]
    )


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_the_stage_report_holds_each_shards_lag_and_the_records_read(
    spark, emulator, stream, put_records, tmp_path
) -> None:
    """The worker's report (``records``, ``lag ms`` per shard: MillisBehindLatest) comes from
    the native source too, under the pid of the process that built the query — the engine
    shows it on the progress display, the status page and /metrics as for the worker."""
    import os

    s = stream(2)
    put_records(s, data(40))
    state = tmp_path / "state"
    state.mkdir()
    ctx = replace(
        ctx_for(tmp_path, args(s, emulator.endpoint_url, "--max-records-per-cycle", "8")), state_dir=str(state)
    )
    batches = run(spark, ctx, tmp_path)
    assert len(batches) >= 3 and len(concat(list(batches.values()))) == 40

    report = json.loads((state / f"report-0-{os.getpid()}.json").read_text())
    assert report["records"] == 40
    lags = report["lag ms"]
    assert sorted(lags) == sorted(shard_contents(emulator, s))  # every shard, by id
    assert all(isinstance(ms, int) and ms >= 0 for ms in lags.values()), lags
