"""Kafka pieces that need no broker."""

from __future__ import annotations

import uuid
from typing import ClassVar

import pytest
from etlstage_workers.kafka import broker
from etlstage_workers.kafka.options import default_name


def test_a_cluster_id_never_starts_with_a_dash(monkeypatch):
    """An id starting with '-' made the storage format step read it as an option (it failed)."""
    ids = iter([uuid.UUID(bytes=b"\xf8" + b"\x00" * 15), uuid.UUID(bytes=b"\x01" * 16)])
    monkeypatch.setattr(broker.uuid, "uuid4", lambda: next(ids))
    got = broker.cluster_id()
    assert got == "AQEBAQEBAQEBAQEBAQEBAQ"


def test_default_group_and_transactional_names_come_from_the_stage_folder():
    assert default_name("/x/.etlstage/orders/stages/read", "read") == "etlstage.orders.read"
    assert default_name("", "read") == "etlstage.read"


class _Captured:
    """A stand-in ``confluent_kafka.Consumer`` that keeps its settings."""

    conf: ClassVar[dict[str, object]] = {}

    def __init__(self, conf, logger=None):
        _Captured.conf = conf

    def subscribe(self, topics, **callbacks):
        pass


def _extractor_conf(monkeypatch, config=None):
    import confluent_kafka
    from etlstage_workers.kafka.extractor import KafkaExtractor
    from etlstage_workers.kafka.options import Options

    from etlstage.protocol import Scenario

    monkeypatch.setattr(confluent_kafka, "Consumer", _Captured)
    w = KafkaExtractor(Options(bootstrap="127.0.0.1:1", topics=["t"], group="g", config=config or {}))
    w.scenario = Scenario(type="E", mode="cyclic")
    w.setup()
    return _Captured.conf


def test_the_fetcher_resumes_soon_after_a_full_prefetch_queue(monkeypatch):
    """librdkafka's 1 s fetch.queue.backoff.ms stalled windows for up to a second
    (docs/workers/kafka.md#throughput); a --config of it still wins."""
    assert _extractor_conf(monkeypatch)["fetch.queue.backoff.ms"] == "20"
    assert _extractor_conf(monkeypatch, {"fetch.queue.backoff.ms": "500"})["fetch.queue.backoff.ms"] == "500"


class _Msg:
    def __init__(self, partition, offset, eof=False):
        self.p, self.o, self.eof = partition, offset, eof

    def error(self):
        if not self.eof:
            return None
        from confluent_kafka import KafkaError

        return KafkaError(KafkaError._PARTITION_EOF)

    def topic(self):
        return "t"

    def partition(self):
        return self.p

    def offset(self):
        return self.o

    def timestamp(self):
        return (1, 1000 + self.o)


def test_a_read_notes_the_end_of_a_partition_only_when_no_record_of_it_follows():
    from types import SimpleNamespace

    from etlstage_workers.kafka.extractor import KafkaExtractor
    from etlstage_workers.kafka.options import Options

    w = KafkaExtractor(Options(bootstrap="127.0.0.1:1", topics=["t"], group="g"))
    w._assigned = {("t", 0), ("t", 1)}
    got = [_Msg(0, 5), _Msg(0, 6, eof=True), _Msg(1, 3), _Msg(1, 4, eof=True), _Msg(0, 6)]
    w.consumer = SimpleNamespace(consume=lambda n, timeout: got)
    records = w._read(10, 0.1)
    assert [(m.partition(), m.offset()) for m in records] == [(0, 5), (1, 3), (0, 6)]
    assert w._at_end == {("t", 1)}  # partition 0 had a record after its event
    assert w._building == {("t", 0): 7, ("t", 1): 4}
    # events ahead of a record count as zero records before it: the record comes after both
    got[:] = [_Msg(1, 4, eof=True), _Msg(0, 7, eof=True), _Msg(0, 7)]
    w._at_end.clear()
    w._read(10, 0.1)
    assert w._at_end == {("t", 1)}


def test_a_window_is_one_checked_block_unless_a_value_holds_a_marker():
    from etlstage_workers.kafka.framing import Framer

    from etlstage.protocol import DEFAULT_MARKERS, Checked

    class V(_Msg):
        def __init__(self, offset, value):
            super().__init__(0, offset)
            self.v = value

        def value(self):
            return self.v

        def key(self):
            return None

        def headers(self):
            return None

    framer = Framer(DEFAULT_MARKERS)
    clean = framer.frame([V(0, b'{"a":1}'), V(1, None), V(2, b"x")])
    assert isinstance(clean, Checked) and clean.block == b'{"a":1}\n\nx\n'
    mixed = framer.frame([V(0, b'{"a":\n1}\n'), V(1, b"x")])
    assert not isinstance(mixed, Checked) and mixed == [b'{"a":1}', b"x"]  # JSON re-serialised compactly


def test_records_of_a_partition_no_longer_ours_are_dropped_after_a_revoke():
    """While nothing ever left us the scan for each partition's last record stops early;
    after a revoke it is complete, so records fetched before it are never sent on."""
    from types import SimpleNamespace

    from etlstage_workers.kafka.extractor import KafkaExtractor
    from etlstage_workers.kafka.options import Options

    w = KafkaExtractor(Options(bootstrap="127.0.0.1:1", topics=["t"], group="g"))
    w._assigned = {("t", 0), ("t", 1)}
    w._drop({("t", 1)}, "revoked")
    got = [_Msg(1, 8), _Msg(0, 5)]
    w.consumer = SimpleNamespace(consume=lambda n, timeout: got)
    assert [(m.partition(), m.offset()) for m in w._read(10, 0.1)] == [(0, 5)]
    assert w._building == {("t", 0): 6}


class _Valued(_Msg):
    def value(self):
        return b"v%d" % self.o

    def key(self):
        return None

    def headers(self):
        return None


def test_no_garbage_collection_while_a_window_is_read_and_as_before_after_it():
    """Every record is an object the collector tracks: collections during a window walked
    its 10,000 records again and again (docs/workers/kafka.md#throughput)."""
    import gc
    from types import SimpleNamespace

    from etlstage_workers.kafka.extractor import KafkaExtractor
    from etlstage_workers.kafka.framing import Framer
    from etlstage_workers.kafka.options import Options

    from etlstage.protocol import DEFAULT_MARKERS

    w = KafkaExtractor(Options(bootstrap="127.0.0.1:1", topics=["t"], group="g"))
    w.framer = Framer(DEFAULT_MARKERS)
    w._assigned, w._assignment_known = {("t", 0)}, True
    collecting: list[bool] = []

    def consume(n, timeout):
        collecting.append(gc.isenabled())
        return [_Valued(0, 0), _Valued(0, 1, eof=True)]

    w.consumer = SimpleNamespace(consume=consume)
    assert gc.isenabled()
    assert w._cycle() == [b"v0"]
    assert collecting == [False] and gc.isenabled()
    gc.disable()  # a program that keeps the collector off: the window leaves it off
    try:
        w._cycle()
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_the_loader_acknowledges_a_batch_only_by_a_flush_begun_after_it_was_produced():
    """The loader's flushes run in a thread while the next batch is parsed and produced; a
    flush that was under way when a batch's last message was produced does not cover it."""
    import threading

    from etlstage_workers.kafka.loader import _Flusher

    begun = threading.Semaphore(0)
    releases: list[threading.Event] = []

    def flush():
        releases.append(threading.Event())
        begun.release()
        assert releases[-1].wait(10)

    acknowledged: list[int] = []
    flusher = _Flusher(flush, acknowledged.append)
    first = flusher.after_batch(3)
    assert begun.acquire(timeout=10)
    second = flusher.after_batch(5)  # produced while the first flush runs
    assert not first.done()
    releases[0].set()
    first.result(10)
    assert acknowledged == [3]  # told before the future completed: the report with its EOP counts it
    assert begun.acquire(timeout=10)  # a second flush, for the second batch
    assert not second.done()
    releases[1].set()
    second.result(10)
    flusher.close()
    assert len(releases) == 2 and acknowledged == [3, 5]


def test_a_failed_flush_fails_every_batch_it_covered_and_close_flushes_what_waits():
    import threading

    from etlstage_workers.kafka.loader import LoadFailed, _Flusher

    outcomes = iter([None, LoadFailed("the broker refused a message of the batch"), None])
    begun = threading.Semaphore(0)
    release = threading.Event()

    def flush():
        begun.release()
        assert release.wait(10)
        outcome = next(outcomes)
        if outcome is not None:
            raise outcome

    acknowledged: list[int] = []
    flusher = _Flusher(flush, acknowledged.append)
    ok = flusher.after_batch(1)
    assert begun.acquire(timeout=10)
    covered = [flusher.after_batch(2), flusher.after_batch(3)]  # both wait for the next flush
    release.set()
    assert ok.result(10) is None
    for f in covered:
        with pytest.raises(LoadFailed, match="refused"):
            f.result(10)
    last = flusher.after_batch(4)
    flusher.close()  # a batch still waiting is flushed before the thread ends
    assert last.done() and last.exception() is None
    assert acknowledged == [1, 4]  # a failed batch is never counted as written


def test_the_spark_sink_returns_a_micro_batch_only_once_the_broker_has_it(monkeypatch):
    """Spark commits a micro-batch when ``foreachBatch`` returns: the loader's flush runs in
    its own thread, so the sink waits for it (returning earlier loses the micro-batch to a
    crash after Spark's commit)."""
    import threading
    import time
    from types import SimpleNamespace

    import confluent_kafka
    import pyarrow as pa
    from etlstage_workers.kafka.options import LoadOptions
    from etlstage_workers.kafka.spark_sink import KafkaBatches

    from etlstage.protocol import Scenario

    class SlowBroker:
        acknowledged: ClassVar[list[bytes]] = []

        def __init__(self, conf, logger=None):
            self.queued: list[bytes] = []
            self.lock = threading.Lock()

        def produce(self, topic, value, key=None):
            with self.lock:
                self.queued.append(value)

        def flush(self, timeout=None):
            time.sleep(0.3)
            with self.lock:
                SlowBroker.acknowledged += self.queued
                self.queued = []
            return 0

    monkeypatch.setattr(confluent_kafka, "Producer", SlowBroker)
    sink = KafkaBatches(LoadOptions(bootstrap="127.0.0.1:1", topic="t"), Scenario(type="L", mode="batch"))
    batch = SimpleNamespace(toArrow=lambda: pa.table({"value": [b"a", b"b"]}))
    sink.write(batch, 0)  # type: ignore[arg-type]
    assert SlowBroker.acknowledged == [b"a", b"b"]
