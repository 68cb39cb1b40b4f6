"""The Kafka E-worker: a consumer group member whose offsets move only when a window is loaded.

Cyclic mode, worker-managed offsets (docs/protocol.md: windows). Each instance of the stage
is a member of one consumer group, so the group spreads the topics' partitions over the
instances (cooperative-sticky: a rebalance moves only the partitions it must). A cycle
hands out what librdkafka has fetched in the background (its prefetch queue is the read
ahead), and remembers per partition the offset after the last record in it. Those
offsets are committed to Kafka by ``on_window_done`` — called when the *next* request
arrives, i.e. when everything emitted before is loaded. Nothing is committed earlier,
stdin EOF commits nothing; a restarted or new owner of a partition starts from its
committed offset, so an unacknowledged window is read again (at-least-once, never a gap).

A partition taken away by a rebalance is dropped from the offsets waiting to be
committed: its new owner reads it from the last committed offset (records of the open
window come twice, never zero times), and no offset of ours can move the group's position
backwards over what the new owner committed since.

Plain mode reads every assigned partition to its end, then exits; it never commits.
"""

from __future__ import annotations

import gc
import logging
import threading
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

from etlstage_workers.kafka.clientlog import client_logger
from etlstage_workers.kafka.framing import Framer
from etlstage_workers.kafka.options import OWN_CONSUMER, Options, default_name

from etlstage.errors import ConfigError
from etlstage.worker import Extractor, Request
from etlstage.worker.memory import keep_freed_memory

log = logging.getLogger("etlstage.kafka")

Part = tuple[str, int]  # (topic, partition)
# Once the prefetch queue is over queued.max.messages.kbytes, librdkafka stops fetching for
# fetch.queue.backoff.ms (1000 ms by default): a window read while the queue drains then
# waits up to a second for its last partition. 20 ms resumes at once. (--config overrides.)
FETCH_TUNING = {"fetch.queue.backoff.ms": "20"}


class KafkaExtractor(Extractor):
    def __init__(self, options: Options) -> None:
        self.options = options
        self.consumer: Any = None
        self._assigned: set[Part] = set()
        self._assignment_known = False  # the group assigned us something (maybe nothing) at least once
        self._ever_dropped = False  # a partition was revoked or lost at least once
        self._at_end: set[Part] = set()  # reached the end since the last record read from it
        self._pending: dict[Part, int] = {}  # offsets to commit once the window emitted last is loaded
        self._building: dict[Part, int] = {}  # offsets of the cycle being put together
        self._committing: _Commit | None = None  # the previous window's commit, under way
        self._next: dict[Part, int] = {}  # offset after the last record read (for lag)
        self._last_ts: dict[Part, int] = {}  # timestamp (ms) of the last record read
        self._last_lag_log = time.monotonic()
        self.records_out = 0
        self.commits = 0
        self.rebalances = 0

    # --- life cycle ---------------------------------------------------------------------

    def setup(self) -> None:
        from confluent_kafka import Consumer

        sc, o = self.scenario, self.options
        if sc.type != "E":
            raise ConfigError([f"the Kafka extractor is an E-worker; ETLSTAGE_TYPE is {sc.type!r}"])
        if sc.mode == "cyclic" and sc.offsets != "worker":
            raise ConfigError(["the Kafka extractor commits its own offsets to Kafka: use offsets: worker"])
        self.framer = Framer(sc.markers, envelope=o.envelope, data_encoding=o.data_encoding, on_marker=o.on_marker)
        keep_freed_memory()  # each window's block and values reuse the last one's memory
        group = o.group or default_name(sc.state_dir, sc.stage)
        conf = {
            **o.client_config(OWN_CONSUMER, "etlstage-kafka"),
            "group.id": group,
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "enable.partition.eof": True,
            "auto.offset.reset": "latest" if o.start == "latest" else "earliest",
            "isolation.level": "read_committed" if o.read_committed else "read_uncommitted",
            "client.id": f"etlstage-kafka-{sc.stage}-{sc.instance}",
        }
        conf.setdefault("partition.assignment.strategy", "cooperative-sticky")
        # a killed worker's partitions wait this long before the group gives them to its
        # restarted self or another instance (librdkafka: 45 s). No static membership: a
        # coordinator restart fences a static member's in-flight commit, a fatal error.
        conf.setdefault("session.timeout.ms", "10000")
        conf.setdefault("heartbeat.interval.ms", "3000")
        for key, value in FETCH_TUNING.items():
            conf.setdefault(key, value)
        self.consumer = Consumer(conf, logger=client_logger())
        self.consumer.subscribe(o.topics, on_assign=self._on_assign, on_revoke=self._on_revoke, on_lost=self._on_lost)
        log.info(
            "instance %d/%d joins group %s on %s (bootstrap %s)",
            sc.instance,
            sc.instances,
            group,
            ", ".join(o.topics),
            o.bootstrap,
        )

    def teardown(self) -> None:
        # stdin EOF: maybe the supervisor died; commit nothing, leave the group at once
        self._log_lag(force=True)
        if self._committing is not None:  # begun for a request whose cycle did not end
            self._committing.result()
        if self.consumer is not None:
            self.consumer.close()

    def report(self) -> dict[str, object]:
        lag = self.lag()
        now_ms = int(time.time() * 1000)
        return {
            "records": self.records_out,
            "commits": self.commits,
            "rebalances": self.rebalances,
            "lag messages": {_name(p): n for p, n in lag.items()},
            # how old the last record read is, while records wait behind it (0 once caught up)
            "lag ms": {_name(p): max(0, now_ms - self._last_ts.get(p, now_ms)) if n else 0 for p, n in lag.items()},
        }

    def extract(self, request: Request | None) -> Iterable[bytes]:
        if request is None:
            return self._plain()
        return self._cycle()

    def on_window_done(self, request: Request) -> None:
        """The previous cycle is loaded: its offsets are committed to Kafka — a synchronous
        commit in a thread of its own while this cycle reads, finished before the cycle is
        answered (a commit's round trip is then no longer part of each window's time)."""
        mine = {p: o for p, o in self._pending.items() if p in self._assigned}
        if mine:
            self._committing = _Commit(self.consumer, mine)

    # --- consumer group -----------------------------------------------------------------

    def _on_assign(self, consumer: Any, partitions: list[Any]) -> None:
        self._assignment_known = True
        self.rebalances += 1
        parts = {(tp.topic, tp.partition) for tp in partitions}
        self._assigned |= parts
        self._at_end -= parts
        log.info("assigned: %s", ", ".join(sorted(map(_name, parts))) or "nothing new")
        if partitions and self.options.start != "earliest":
            self._pin_start(consumer, partitions)

    def _pin_start(self, consumer: Any, partitions: list[Any]) -> None:
        """A partition with no committed offset starts at its end (latest) or at the first
        record at the timestamp: that start is committed at once, so a restart before the
        first window is loaded resumes there rather than at a later end (nothing skipped)."""
        from confluent_kafka import OFFSET_END, TopicPartition

        committed = consumer.committed(partitions, timeout=30)
        fresh = [tp for tp in committed if tp.offset < 0]
        if not fresh:
            return
        if self.options.start == "timestamp":
            asked = [TopicPartition(tp.topic, tp.partition, int(self.options.timestamp_ms or 0)) for tp in fresh]
            found = consumer.offsets_for_times(asked, timeout=30)
        else:
            found = [TopicPartition(tp.topic, tp.partition, OFFSET_END) for tp in fresh]
        starts = []
        for tp in found:
            offset = tp.offset
            if offset < 0:  # no record at or after the time, or "latest": the current end
                offset = consumer.get_watermark_offsets(TopicPartition(tp.topic, tp.partition), timeout=30)[1]
            starts.append(TopicPartition(tp.topic, tp.partition, offset))
        consumer.commit(offsets=starts, asynchronous=False)
        log.info("start pinned: %s", ", ".join(f"{tp.topic}/{tp.partition}@{tp.offset}" for tp in starts))

    def _on_revoke(self, consumer: Any, partitions: list[Any]) -> None:
        self.rebalances += 1
        self._drop({(tp.topic, tp.partition) for tp in partitions}, "revoked")

    def _on_lost(self, consumer: Any, partitions: list[Any]) -> None:
        self._drop({(tp.topic, tp.partition) for tp in partitions}, "lost")

    def _drop(self, parts: set[Part], how: str) -> None:
        """Partitions that left us: their uncommitted offsets are not ours to commit any more."""
        self._ever_dropped = True
        self._assigned -= parts
        self._at_end -= parts
        for table in (self._pending, self._building, self._next, self._last_ts):
            for p in parts:
                table.pop(p, None)
        log.info("%s: %s (their open window is read again by the new owner)", how, ", ".join(sorted(map(_name, parts))))

    def _finish_commit(self) -> None:
        """Wait for the commit under way; what it committed is no longer pending."""
        done, self._committing = self._committing, None
        if done is None:
            return
        error = done.result()
        if error is not None:
            # a rebalance under way: what is still ours goes with the next window's commit
            log.warning("commit of %s failed (%s): tried again after the next window", _offsets(done.offsets), error)
            return
        self.commits += 1
        log.debug("committed %s", _offsets(done.offsets))
        for p, o in done.offsets.items():
            if self._pending.get(p) == o:
                del self._pending[p]

    # --- cycles -------------------------------------------------------------------------

    def _caught_up(self) -> bool:
        return self._assignment_known and self._assigned <= self._at_end

    def _cycle(self) -> list[bytes]:
        with _collector_paused():
            return self._window()

    def _window(self) -> list[bytes]:
        o = self.options
        records: list[Any] = []
        deadline = time.monotonic() + o.max_cycle_seconds
        self._building = {}
        while len(records) < o.max_records_per_cycle:
            room = o.max_records_per_cycle - len(records)
            # even when caught up, a short wait: a fetch under way brings what arrived meanwhile
            records += self._read(min(room, 10000), o.poll_seconds)
            if self._caught_up() or (records and time.monotonic() >= deadline):
                break
        out = self.framer.frame(records)  # the window framed in one go: one block, one marker scan
        self._finish_commit()  # the previous window's offsets are in Kafka before this one goes out
        # a window emitted before and not committed (its commit failed) stays pending: newer wins
        self._pending.update(self._building)
        self._building = {}
        self.records_out += len(out)
        self._log_lag()
        return out

    def _read(self, n: int, timeout: float) -> list[Any]:
        """Up to ``n`` records; end-of-partition events noted; errors raised."""
        got = self.consumer.consume(n, timeout)
        flagged = [i for i, m in enumerate(got) if m.error() is not None]
        records = got if not flagged else [m for m in got if m.error() is None]
        events = [(i - k, got[i]) for k, i in enumerate(flagged)]  # (records before it, event)
        last = self._last_per_partition(records)
        if any(part not in self._assigned for part in last):  # fetched before a revoke: its new owner reads them
            records = [m for m in records if (m.topic(), m.partition()) in self._assigned]
        for part, (_, m) in last.items():
            if part in self._assigned:
                self._at_end.discard(part)
                self._building[part] = self._next[part] = m.offset() + 1
                kind, ts = m.timestamp()
                if kind:
                    self._last_ts[part] = ts
        for before, m in events:
            self._event(m, before, last)
        return records

    def _last_per_partition(self, records: list[Any]) -> dict[Part, tuple[int, Any]]:
        """Per partition, its last record and where it is (offset to commit, lag, timestamp).
        The scan from the end stops once every assigned partition is seen, but only while
        no partition ever left us: after that, records of a partition no longer ours may
        come, and the full scan finds them."""
        last: dict[Part, tuple[int, Any]] = {}
        stop = self._assigned if self._assigned and not self._ever_dropped else None
        for i in range(len(records) - 1, -1, -1):
            m = records[i]
            part = (m.topic(), m.partition())
            if part not in last:
                last[part] = (i, m)
                if stop is not None and len(last) >= len(stop) and last.keys() >= stop:
                    break
        return last

    def _event(self, m: Any, before: int, last: dict[Part, tuple[int, Any]]) -> None:
        from confluent_kafka import KafkaError, KafkaException

        err = m.error()
        part = (m.topic(), m.partition())
        if err.code() == KafkaError._PARTITION_EOF:
            # at its end unless a record of it came after the event
            if part in self._assigned and last.get(part, (-1, None))[0] < before:
                self._at_end.add(part)
            return
        if err.fatal() or not err.retriable():
            raise KafkaException(err)
        log.warning("%s: %s (librdkafka retries)", _name(part), err)

    def _plain(self) -> Iterator[bytes]:
        """Every assigned partition to its end (the group's committed offsets, or --start); no commit."""
        while not self._caught_up():
            got = self._read(10000, self.options.poll_seconds)
            self.records_out += len(got)
            yield from self.framer.frame(got)
        self._building = {}
        self._log_lag(force=True)

    # --- lag ----------------------------------------------------------------------------

    def lag(self) -> dict[Part, int]:
        """Records behind the end per assigned partition, from the last fetch's high watermark."""
        from confluent_kafka import TopicPartition

        out = {}
        for part in sorted(self._assigned):
            try:
                _, high = self.consumer.get_watermark_offsets(TopicPartition(*part), cached=True)
            except Exception:
                continue
            if high is None or high < 0:
                continue
            position = self._next.get(part)
            if position is None:
                continue
            out[part] = max(0, high - position)
        return out

    def _log_lag(self, force: bool = False) -> None:
        now = time.monotonic()
        if self.consumer is None or (not force and now - self._last_lag_log < self.options.lag_log_interval):
            return
        self._last_lag_log = now
        lag = self.lag()
        if lag:
            log.info("records behind: %s", ", ".join(f"{_name(p)}={n}" for p, n in lag.items()))


@contextmanager
def _collector_paused() -> Iterator[None]:
    """No garbage collection while a window is read. Every record is an object the collector
    tracks, and a window holds up to 10,000 of them: collections triggered by their own
    allocation walked them again and again (14 % of a bare consume loop's time). They form
    no cycles and are freed with the window, so collecting can wait for its end."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


class _Commit:
    """One synchronous offset commit in a thread (librdkafka is thread-safe; the call
    releases the GIL). Only the commit call runs there: the bookkeeping stays in the
    request loop's thread."""

    def __init__(self, consumer: Any, offsets: dict[Part, int]) -> None:
        self.consumer = consumer
        self.offsets = offsets
        self.error: Exception | None = None
        self._thread = threading.Thread(target=self._run, name="kafka-commit", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        from confluent_kafka import KafkaException, TopicPartition

        try:
            tps = [TopicPartition(t, p, o) for (t, p), o in self.offsets.items()]
            self.consumer.commit(offsets=tps, asynchronous=False)
        except KafkaException as exc:
            self.error = exc

    def result(self) -> Exception | None:
        self._thread.join()
        return self.error


def _name(part: Part) -> str:
    return f"{part[0]}/{part[1]}"


def _offsets(offsets: dict[Part, int]) -> str:
    return ", ".join(f"{_name(p)}@{o}" for p, o in sorted(offsets.items()))
