"""The Kafka L-worker: a batch is acknowledged (EOP) only once the broker has it.

Every batch is produced with ``acks=all`` by an idempotent producer. ``load`` hands the
SDK a future that completes once every message of the batch was acknowledged by the
broker: a thread flushes the producer while the SDK parses the next batch, and the SDK
writes the EOP only then, in order (a delivery error fails the batch: the worker exits 1
with the batch unacknowledged, the supervisor sends it again). That is at-least-once: a
batch that failed half-way is written again whole.

``--transactional``: each batch is one Kafka transaction, and in the same transaction a
record in a *ledger* topic lists the SHA-256 of every message the batch wrote. Before a
batch the loader reads the ledger up to its end (read_committed), and leaves out the
messages already written. So a batch sent again after a crash — the loader's after its
commit and before its EOP, or the whole pipeline's, whose extractor then reads the open
window again, maybe cut into other batches — writes nothing twice; a loader killed inside
a transaction leaves it open until the restarted loader (same ``transactional.id``) aborts
it, and read_committed consumers never see it. Identical messages count as one record.
A loader fenced by another producer of its ``transactional.id`` (two live loaders sharing
one id) fails its batch with :class:`Fenced`, unacknowledged and not committed.
"""

from __future__ import annotations

import collections
import hashlib
import json
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from etlstage_workers.kafka.broker import create_topic
from etlstage_workers.kafka.clientlog import client_logger
from etlstage_workers.kafka.options import OWN_PRODUCER, LoadOptions, default_name

from etlstage.errors import ConfigError, EtlstageError
from etlstage.protocol.pointer import MISSING, parse_pointer, resolve
from etlstage.worker import Loader
from etlstage.worker.memory import keep_freed_memory

log = logging.getLogger("etlstage.kafka")


class LoadFailed(EtlstageError):
    """The broker did not take a batch (the batch stays unacknowledged)."""


class Fenced(LoadFailed):
    """Another producer with this loader's transactional id started: the broker fenced
    this one, which can write nothing more (the open batch stays unacknowledged)."""


class KafkaLoader(Loader):
    def __init__(self, options: LoadOptions) -> None:
        self.options = options
        self.producer: Any = None
        self.ledger: Ledger | None = None
        self._key = parse_pointer(options.key) if options.key is not None else None
        self.written = 0
        self.skipped = 0
        self.batches = 0
        self._flusher: _Flusher | None = None
        self.transactional_id: str | None = None

    def setup(self) -> None:
        from confluent_kafka import Producer

        sc, o = self.scenario, self.options
        if sc.type != "L":
            raise ConfigError([f"the Kafka loader is an L-worker; ETLSTAGE_TYPE is {sc.type!r}"])
        keep_freed_memory()  # each batch's block and messages reuse the last one's memory
        conf: dict[str, Any] = {
            **o.client_config(OWN_PRODUCER, "etlstage-kafka-load"),
            "acks": "all",
            "enable.idempotence": True,
            "client.id": f"etlstage-kafka-load-{sc.stage}-{sc.instance}",
            # a delivery report only for a failed message: the per-message callback is most of
            # the loader's cost on small messages, and success is what the flush tells
            "delivery.report.only.error": True,
            "on_delivery": self._delivered,
        }
        conf.setdefault("linger.ms", o.linger_ms)
        if o.transactional:
            tid = o.transactional_id or f"{default_name(sc.state_dir, sc.stage)}.{sc.instance}"
            conf["transactional.id"] = self.transactional_id = tid
            self.producer = Producer(conf, logger=client_logger())
            # fences an older producer of this id and aborts the transaction it left open
            self.producer.init_transactions(60)
            ledger_topic = o.ledger_topic or f"{o.topic}.etlstage-ledger"
            self.ledger = Ledger(o.client_config(OWN_PRODUCER, "etlstage-kafka-load"), ledger_topic, o.ledger_batches)
            log.info("transactional id %s; ledger %s: %d messages noted", tid, ledger_topic, len(self.ledger.seen))
        else:
            self.producer = Producer(conf, logger=client_logger())
            self._flusher = _Flusher(self._flush, self._acknowledged)
        log.info("writes to %s (bootstrap %s)", o.topic, o.bootstrap)

    def teardown(self) -> None:
        if self._flusher is not None:
            self._flusher.close()
        if self.producer is not None:
            self.producer.flush(30)
        if self.ledger is not None:
            self.ledger.close()

    def report(self) -> dict[str, object]:
        report: dict[str, object] = {
            "output": f"Kafka topic {self.options.topic}",
            "written": self.written,
            "batches": self.batches,
        }
        if self.ledger is not None:
            report["duplicates skipped"] = self.skipped
        return report

    def load(self, messages: list[bytes]) -> Future[None] | None:
        if self._flusher is not None:
            self._produce_all(messages)
            return self._flusher.after_batch(len(messages))
        self._acknowledged(self._load_transaction(messages))
        return None

    def _acknowledged(self, written: int) -> None:
        """A batch is in the topic: the report written with its EOP counts it (and no later one)."""
        self.written += written
        self.batches += 1

    # --- at-least-once ------------------------------------------------------------------

    def _produce_all(self, messages: list[bytes]) -> None:
        topic = self.options.topic
        produce = self.producer.produce
        keyed = self._key is not None
        for m in messages:
            try:
                produce(topic, m, self._key_of(m)) if keyed else produce(topic, m)
            except BufferError:  # the local queue is full: let deliveries drain it, then again
                self._produce_when_room(topic, m, self._key_of(m) if keyed else None)

    def _produce_when_room(self, topic: str, message: bytes, key: bytes | None) -> None:
        while True:
            self.producer.poll(0.05)
            try:
                self.producer.produce(topic, message, key)
                return
            except BufferError:
                continue

    def _delivered(self, err: Any, msg: Any) -> None:
        if err is not None and self._error is None:
            self._error = f"{err} (offset of the failed message unknown; partition {msg.partition()})"

    _error: str | None = None

    def _flush(self) -> None:
        left = self.producer.flush(300)
        if left:
            raise LoadFailed(f"{left} messages of the batch not acknowledged by {self.options.topic} after 300 s")
        if self._error is not None:
            error, self._error = self._error, None
            raise LoadFailed(f"the broker refused a message of the batch: {error}")

    def _key_of(self, message: bytes) -> bytes | None:
        if self._key is None:
            return None
        try:
            value = resolve(json.loads(message), self._key)
        except ValueError:
            return None
        if value is MISSING or value is None:
            return None
        text = value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))
        return text.encode("utf-8")

    # --- transactional ------------------------------------------------------------------

    def _load_transaction(self, messages: list[bytes]) -> int:
        """The batch's messages not written before, in one transaction; how many."""
        from confluent_kafka import KafkaException

        assert self.ledger is not None
        self.ledger.catch_up()
        fresh: list[bytes] = []
        digests: list[bytes] = []
        batch_seen: set[bytes] = set()
        for m in messages:
            d = hashlib.sha256(m).digest()
            if d in self.ledger.seen or d in batch_seen:
                continue
            batch_seen.add(d)
            fresh.append(m)
            digests.append(d)
        self.skipped += len(messages) - len(fresh)
        if len(fresh) < len(messages):
            log.info("%d of %d messages were written before: left out", len(messages) - len(fresh), len(messages))
        if not fresh:
            return 0
        p = self.producer
        try:
            p.begin_transaction()
        except KafkaException as exc:
            self._fail_if_fatal(exc.args[0])
            raise
        try:
            self._produce_all(fresh)
            p.produce(self.ledger.topic, b"".join(digests), None)
            self._flush()
            self._commit()
        except (KafkaException, LoadFailed, SystemError):
            # once the producer has a fatal error (fenced), confluent-kafka's flush() raises a
            # SystemError that does not say which; the abort then raises the fatal error
            try:
                p.abort_transaction(60)
            except KafkaException as exc:
                self._fail_if_fatal(exc.args[0])
                log.warning("abort of the failed transaction: %s", exc)
            raise
        # the ledger record comes back with the next catch_up: noted once, in order
        return len(fresh)

    def _fail_if_fatal(self, err: Any) -> None:
        """``err`` (a KafkaError) fatal: the producer can write nothing more; raise a
        LoadFailed that says why, and what to do when it was fenced."""
        from confluent_kafka import KafkaError

        if not err.fatal():
            return
        # librdkafka says _FENCED; the broker's own codes too, should one be the fatal error
        if err.code() in (KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH):
            tid = self.transactional_id
            if self.options.transactional_id:
                advice = "give each instance its own --transactional-id, or run one instance"
            else:  # the default id: one per pipeline, stage and instance
                advice = "is this pipeline running twice? run it once, or give each its own --transactional-id"
            raise Fenced(
                f"another loader with transactional id {tid!r} started and fenced this one "
                f"(two live loaders share one transactional id: {advice})"
            ) from None
        raise LoadFailed(f"the Kafka producer stopped on a fatal error: {err.name()}: {err.str()}") from None

    def _commit(self) -> None:
        from confluent_kafka import KafkaException

        for attempt in range(5):
            try:
                self.producer.commit_transaction(60)
                return
            except KafkaException as exc:
                err = exc.args[0]
                if err.retriable() and attempt < 4:
                    time.sleep(0.5 * 2**attempt)
                    continue
                raise


class _Flusher:
    """Batches produced and not yet acknowledged by the broker. One thread flushes the
    producer — every message produced before the flush began is acknowledged or failed
    when it returns — and completes the futures of the batches produced before it began;
    batches produced meanwhile wait for the next flush."""

    def __init__(self, flush: Callable[[], None], acknowledged: Callable[[int], None]) -> None:
        """``acknowledged(n)``: a batch of ``n`` messages is in the topic, told before its future completes."""
        self._flush = flush
        self._acknowledged = acknowledged
        self._waiting: list[tuple[Future[None], int]] = []
        self._closed = False
        self._wake = threading.Condition()
        self._thread = threading.Thread(target=self._run, name="kafka-flush", daemon=True)
        self._thread.start()

    def after_batch(self, messages: int) -> Future[None]:
        """A future for the batch whose ``messages`` were all produced just now."""
        done: Future[None] = Future()
        with self._wake:
            self._waiting.append((done, messages))
            self._wake.notify()
        return done

    def _run(self) -> None:
        while True:
            with self._wake:
                while not self._waiting and not self._closed:
                    self._wake.wait()
                if not self._waiting:
                    return
                batches, self._waiting = self._waiting, []
            try:
                self._flush()
            except BaseException as exc:  # each batch fails: the SDK stops at the first, unacknowledged
                for f, _ in batches:
                    f.set_exception(exc)
            else:
                for f, messages in batches:
                    self._acknowledged(messages)
                    f.set_result(None)

    def close(self) -> None:
        with self._wake:
            self._closed = True
            self._wake.notify()
        self._thread.join()


class Ledger:
    """The digests of the messages the last ``keep`` transactions wrote, from the ledger topic."""

    def __init__(self, conf: dict[str, Any], topic: str, keep: int) -> None:
        from confluent_kafka import Consumer, TopicPartition

        create_topic(conf["bootstrap.servers"], topic, 1)
        self.topic = topic
        self.tp = TopicPartition(topic, 0)
        self.seen: set[bytes] = set()
        self._order: collections.deque[list[bytes]] = collections.deque()
        self._keep = keep
        self.consumer = Consumer(
            {
                **conf,
                "group.id": "etlstage-ledger-reader",  # never joins nor commits: assigned by hand
                "enable.auto.commit": False,
                "isolation.level": "read_committed",
            },
            logger=client_logger(),
        )
        low, high = self.consumer.get_watermark_offsets(self.tp, timeout=30, cached=False)
        # a ledger record and its transaction's commit marker take an offset each
        self._start = max(low, high - 2 * keep)
        self.consumer.assign([TopicPartition(topic, 0, self._start)])
        self.catch_up()

    def catch_up(self, timeout: float = 60.0) -> None:
        """Read every committed ledger record up to the end as it is now: after this, every
        transaction committed before the call is known (an open one is waited for)."""
        _, high = self.consumer.get_watermark_offsets(self.tp, timeout=30, cached=False)
        deadline = time.monotonic() + timeout
        while self._position() < high:
            if time.monotonic() > deadline:
                raise LoadFailed(
                    f"the ledger {self.topic} was not read to offset {high} within {timeout:g} s "
                    "(a transaction of another loader open that long?)"
                )
            for m in self.consumer.consume(1000, 0.2):
                if m.error() is None:
                    value = m.value() or b""
                    self.add([value[i : i + 32] for i in range(0, len(value), 32)])

    def _position(self) -> int:
        """The next offset to read; the assigned start until a first fetch (position is then unset)."""
        from confluent_kafka import TopicPartition

        offset = int(self.consumer.position([TopicPartition(self.topic, 0)])[0].offset)
        return offset if offset >= 0 else self._start

    def add(self, digests: list[bytes]) -> None:
        self.seen.update(digests)
        self._order.append(digests)
        while len(self._order) > self._keep:
            self.seen.difference_update(self._order.popleft())

    def close(self) -> None:
        self.consumer.close()
