"""The Kafka extractor as a native Spark source (workers/kafka/spark_source.py): Spark's own
Kafka source, each row framed by the worker's own framer — the same messages as the
worker's, starting where the consumer group left off."""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
from typing import Any

import pyarrow as pa
import pytest
from etlstage_workers.kafka.framing import Framer
from etlstage_workers.kafka.options import Options
from etlstage_workers.kafka.spark_source import frame_batches, options_from, reader_options

from etlstage.config.model import StageConfig
from etlstage.errors import ConfigError
from etlstage.native import NativeContext
from etlstage.protocol.markers import Markers
from tests.support.kafka import produce
from tests.support.paths import FIXTURES
from tests.support.run_cli import PY, RUN_ONCE
from tests.support.waiting import wait_for

TW = FIXTURES / "tw.py"
SPARK_ROWS = pa.schema(
    [
        ("key", pa.binary()),
        ("value", pa.binary()),
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("offset", pa.int64()),
        ("timestamp", pa.timestamp("us", tz="UTC")),
        ("timestampType", pa.int32()),
        ("headers", pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))),
    ]
)


class _Message:
    """A confluent-kafka message as the worker's framer reads it."""

    def __init__(self, row: dict[str, Any]) -> None:
        self.row = row

    def topic(self) -> str:
        return self.row["topic"]

    def partition(self) -> int:
        return self.row["partition"]

    def offset(self) -> int:
        return self.row["offset"]

    def key(self) -> bytes | None:
        return self.row["key"]

    def value(self) -> bytes | None:
        return self.row["value"]

    def headers(self) -> list[tuple[str, bytes | None]] | None:
        return [(h["key"], h["value"]) for h in self.row["headers"]] or None

    def timestamp(self) -> tuple[int, int]:
        return self.row["timestampType"] + 1, int(self.row["timestamp"].timestamp() * 1000)


ROWS = [
    {"key": b"k1", "value": b'{"a": 1}', "headers": [{"key": "trace", "value": b"abc"}]},
    {"key": None, "value": b"caf\xc3\xa9 \xff binary", "headers": []},
    {"key": b"\x00\x01", "value": b"has a marker \x1e inside", "headers": [{"key": "h", "value": None}]},
    {"key": b"k4", "value": b'{"text": "a \x1e b"}', "headers": []},
    {"key": b"k5", "value": None, "headers": []},
]


@pytest.mark.parametrize("envelope", [False, True])
def test_a_spark_row_becomes_the_message_the_worker_writes_for_its_record(envelope: bool) -> None:
    when = dt.datetime(2026, 11, 26, 5, 0, 0, 123000, tzinfo=dt.UTC)
    rows = [
        {**r, "topic": "orders", "partition": 2, "offset": 40 + i, "timestamp": when, "timestampType": i % 2}
        for i, r in enumerate(ROWS)
    ]
    markers = Markers()
    options = Options(bootstrap="x:1", topics=["orders"], envelope=envelope)
    batch = pa.RecordBatch.from_pylist(rows, schema=SPARK_ROWS)
    got = [v for b in frame_batches(iter([batch]), markers, options) for v in b.column("value").to_pylist()]
    want = Framer(markers, envelope=envelope).frame([_Message(r) for r in rows])
    assert got == want
    assert all(markers.eom not in m for m in got)  # the marker inside a value never reaches the stream raw
    if envelope:
        doc = json.loads(got[0])
        assert (doc["timestamp"], doc["timestampType"], doc["offset"]) == (1795669200123, "create", 40)
        assert json.loads(got[1])["timestampType"] == "logAppend"


def _ctx(argv: list[str], **env: str) -> NativeContext:
    stage = StageConfig(
        name="read", type="E", command=["etlstage-kafka", *argv], markers=Markers(), mode="cyclic", offsets="worker"
    )
    return NativeContext(stage=stage, argv=argv, checkpoint="/nowhere", env=env, state_dir="/s/demo/stages/read")


def test_the_native_source_parses_the_worker_s_arguments_and_refuses_what_spark_cannot_honour() -> None:
    o = options_from(_ctx(["--topic", "a", "--topic", "b", "--max-cycle-seconds", "3"], ETLSTAGE_KAFKA_BOOTSTRAP="h:9"))
    assert (o.bootstrap, o.topics, o.group) == ("h:9", ["a", "b"], "etlstage.demo.read")
    spark_side = reader_options(o, {"a": {"0": 5}, "b": {"0": -2, "1": -1}})
    assert spark_side["subscribe"] == "a,b" and spark_side["kafka.isolation.level"] == "read_committed"
    assert json.loads(spark_side["startingOffsets"]) == {"a": {"0": 5}, "b": {"0": -2, "1": -1}}
    assert spark_side["maxOffsetsPerTrigger"] == "10000" and spark_side["failOnDataLoss"] == "true"
    with pytest.raises(ConfigError, match="librdkafka properties.*native: false"):
        options_from(_ctx(["--topic", "a", "--bootstrap", "h:9", "--config", "security.protocol=SSL"]))
    with pytest.raises(ConfigError, match="--bootstrap"):
        options_from(_ctx(["--topic", "a"]))


def _commit(bootstrap: str, group: str, topic: str, offsets: dict[int, int]) -> None:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        c.commit(offsets=[TopicPartition(topic, p, o) for p, o in offsets.items()], asynchronous=False)
    finally:
        c.close()


def _committed(bootstrap: str, group: str, topic: str) -> dict[int, int]:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        return {tp.partition: tp.offset for tp in c.committed([TopicPartition(topic, 0), TopicPartition(topic, 1)])}
    finally:
        c.close()


def nothing_new_then_new(broker: Any, src: str, group: str, folder: Any, env: dict[str, str]) -> None:
    """A --once run after the one that read everything starts no JVM; one more record on
    partition 0 and the source says it has new input, and the next run loads it."""
    from etlstage_workers.kafka.spark_source import has_new

    from etlstage.config.loader import load_config
    from etlstage.spark.checkpoint import committed_offsets

    again = subprocess.run(RUN_ONCE, cwd=folder, env=env, capture_output=True, text=True, timeout=400)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "nothing new to load: stage 'read' has nothing after the last committed micro-batch" in again.stderr
    config = load_config(folder / "stages.yaml")
    lines = committed_offsets(config.engine.checkpoint)
    assert lines is not None and len(lines) == 1
    offsets = json.loads(lines[0])
    assert offsets == {src: {"0": 60, "1": 40}}
    stage = config.stage("read")
    ctx = NativeContext(stage=stage, argv=list(stage.command[1:]), checkpoint="", env=env, once=True)
    assert not has_new(ctx, offsets)
    produce(broker.bootstrap, src, [(b"k60", b'{"n": 60}')], partition=0)
    assert has_new(ctx, offsets)
    assert has_new(ctx, {src: {"0": 61}})  # a partition the offsets do not hold
    before = (folder / "out.txt").read_text().splitlines()
    last = subprocess.run(RUN_ONCE, cwd=folder, env=env, capture_output=True, text=True, timeout=400)
    assert last.returncode == 0, last.stderr[-3000:]
    added = (folder / "out.txt").read_text().splitlines()[len(before) :]
    assert [(d["partition"], d["offset"]) for d in map(json.loads, added)] == [(0, 60)]


@pytest.mark.slow  # a JVM broker and Spark runs
@pytest.mark.timeout(600)
def test_the_native_source_writes_the_worker_s_messages_from_where_the_group_left_off(broker, topic, tmp_path):
    """The same topic through the worker (supervisor engine) and through Spark's Kafka source
    (``--engine spark``), each with a group that committed offset 30 of partition 0: the same
    envelopes, byte for byte, nothing before the committed offset, and the group's offsets
    at the end afterwards."""
    src = topic(2)
    produce(broker.bootstrap, src, [(b"k%d" % i, b'{"n": %d}' % i) for i in range(60)], partition=0)
    produce(broker.bootstrap, src, [(None, b"p1-%d \x1e" % i) for i in range(40)], partition=1)
    outputs = {}
    for engine in ("supervisor", "spark"):
        group = f"g-{engine}-{src}"
        _commit(broker.bootstrap, group, src, {0: 30})
        folder = tmp_path / engine
        folder.mkdir()
        (folder / "stages.yaml").write_text(f"""
stages:
  - name: read
    type: E
    mode: cyclic
    offsets: worker
    command: [etlstage-kafka, --topic, {src}, --group, {group}, --envelope, --max-records-per-cycle, "25"]
  - {{name: write, type: L, mode: batch, batch_size: 20, command: ["{PY}", "{TW}", append, out.txt]}}
engine: {{kind: {engine}, master: "local[2]"}}
""")
        env = {**os.environ, "ETLSTAGE_KAFKA_BOOTSTRAP": broker.bootstrap}
        done = subprocess.run(RUN_ONCE, cwd=folder, env=env, capture_output=True, text=True, timeout=400)
        assert done.returncode == 0, done.stderr[-3000:]
        outputs[engine] = (folder / "out.txt").read_text().splitlines()
        if engine == "spark":
            assert "Spark's Kafka source" in done.stderr, done.stderr[-3000:]
            nothing_new_then_new(broker, src, group, folder, env)
        # both engines leave the group at the end offsets (Spark's: once the micro-batch committed)
        assert _committed(broker.bootstrap, group, src) == {0: 60 + (engine == "spark"), 1: 40}
    docs = [json.loads(line) for line in outputs["spark"]]
    assert sorted((d["partition"], d["offset"]) for d in docs) == [(0, o) for o in range(30, 60)] + [
        (1, o) for o in range(40)
    ]
    assert sorted(outputs["spark"]) == sorted(outputs["supervisor"])


@pytest.mark.slow  # a JVM broker and Spark runs
@pytest.mark.timeout(600)
def test_a_micro_batch_replayed_after_its_transaction_committed_is_not_written_again(broker, topic, tmp_path):
    """Kafka in, Kafka out, both native: the driver SIGKILLed right after the first
    micro-batch's transaction committed, before Spark logged the micro-batch's commit. The
    next run replays that micro-batch (the same offsets, the same messages); the ledger
    leaves every message out, so the output topic holds each record once."""
    from tests.support.kafka import consume_all

    src, dst = topic(1), topic(1)
    records = [b'{"n": %d}' % i for i in range(200)]
    produce(broker.bootstrap, src, [(None, r) for r in records])
    (tmp_path / "stages.yaml").write_text(f"""
stages:
  - name: read
    type: E
    mode: cyclic
    offsets: worker
    command: [etlstage-kafka, --topic, {src}, --max-records-per-cycle, "50"]
  - name: write
    type: L
    mode: batch
    command: [etlstage-kafka-load, --topic, {dst}, --transactional]
engine: {{kind: spark, master: "local[2]"}}
""")
    env = {**os.environ, "ETLSTAGE_KAFKA_BOOTSTRAP": broker.bootstrap}
    crashed = subprocess.run(
        RUN_ONCE, cwd=tmp_path, env={**env, "ETLSTAGE_KAFKA_SINK_CRASH": "committed"}, capture_output=True, timeout=400
    )
    assert crashed.returncode != 0, crashed.stderr[-3000:]
    # batch 0 committed (its transaction's markers reach the partition just after the commit)
    first = wait_for(lambda: consume_all(broker.bootstrap, dst, idle=1.0) or None, 60, "micro-batch 0 in the topic")
    assert sorted(first) == sorted(records[:50]), crashed.stderr[-3000:]
    assert not (tmp_path / ".etlstage").exists() or not list((tmp_path / ".etlstage").rglob("commits/0"))
    done = subprocess.run(RUN_ONCE, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=400)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "50 written before" in done.stderr, done.stderr[-3000:]  # the replayed micro-batch 0
    got = consume_all(broker.bootstrap, dst, idle=1.0)
    assert len(got) == len(set(got)) and sorted(got) == sorted(records)
