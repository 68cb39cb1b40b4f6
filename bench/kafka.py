"""Kafka workers' speed against bare confluent-kafka loops, in one run on one broker.

    python bench/kafka.py [--records 100000] [--size 1024] [--partitions 4] [--runs 3]

A one-node broker (``etlstage-kafka-broker``'s, on loopback) holds the topics, its log in
``/dev/shm`` where there is one: a run writes a gigabyte a million records, and the disk's
write-back stalls then made runs of one row differ by 2x (``--broker-dir`` to choose). Its
JVM keeps its own compiler and collector (not the tests' quick-start settings, with which
the broker's own pauses set the pace).

1. Produce. (a) a bare loop: ``Producer.produce`` per message (``acks=all``, idempotent,
   the loader's settings), one ``flush`` at the end of each batch of ``--batch`` messages;
   (b) ``etlstage-kafka-load`` through ``serve()``: the same messages as protocol batches
   (EOB after each) read from a pipe, each acknowledged once flushed. Target: loader >= 80 %
   of the bare loop.
2. Consume. (a) a bare loop: a fresh consumer group, ``consume(10000)`` until every
   record is read; (b) the extractor in cyclic mode through ``serve()`` (framing, marker
   checks, the commit of each window on the next request), output to a null sink, until
   an empty cycle. Target: extractor >= 80 % of the bare loop. (c) a fairer bare loop: (a)
   that also writes each batch's values as one block to the null sink and commits
   synchronously after each batch (shown for explanation; the target is against (a)).

Runs alternate who goes first; the best of each is compared.

``--eom-check-ab ROUNDS``: only the extractor and the bare consume loop, the extractor with
the SDK's stray-EOM check as it was before 2026-11-26 (the marker searched for as bytes,
from 512 B a message) and as it is, in turn (docs/performance.md, "The Python SDK's check
for a stray EOM").

3. The extractor's own work (also with ``--no-broker``): the same cyclic ``serve()`` to a
   null sink, fed by a stand-in consumer that hands out ready records from memory (one
   partition, an end-of-partition event once they are out): framing, marker checks,
   bookkeeping and the protocol's blocks, without the client, the broker or the commits.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import itertools
import operator
import os
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient
from etlstage_workers.kafka.broker import Broker, create_topic
from etlstage_workers.kafka.extractor import FETCH_TUNING, KafkaExtractor
from etlstage_workers.kafka.loader import KafkaLoader
from etlstage_workers.kafka.options import LoadOptions, Options

from etlstage.kit.transport import grow_pipe
from etlstage.protocol import Scenario, framing
from etlstage.worker import serve
from etlstage.worker.memory import keep_freed_memory

_ids = itertools.count()


class NullSink(io.RawIOBase):
    def __init__(self) -> None:
        self.bytes = 0

    def writable(self) -> bool:
        return True

    def write(self, b: bytes) -> int:  # type: ignore[override]
        self.bytes += len(b)
        return len(b)


class Requests(io.RawIOBase):
    """A request each time the worker reads, until ``done()``; then one more (it commits the
    last window) and EOF."""

    def __init__(self, done: Callable[[], bool]) -> None:
        self.done = done
        self.last = False

    def readable(self) -> bool:
        return True

    def read1(self, size: int = -1) -> bytes:
        if self.last:
            return b""
        self.last = self.done()
        if self.last:
            self.at = time.perf_counter()  # every record written: the time the bare loop is held to
        return b"\n"

    at = 0.0


def messages(n: int, size: int) -> list[bytes]:
    pad = b"x" * max(0, size - 24)
    return [b'{"id":%d,"p":"%s"}' % (i, pad) for i in range(n)]


def bare_produce(bootstrap: str, topic: str, msgs: list[bytes], batch: int) -> float:
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True, "linger.ms": 5})
    started = time.perf_counter()
    for i in range(0, len(msgs), batch):
        for m in msgs[i : i + batch]:
            while True:
                try:
                    p.produce(topic, m)
                    break
                except BufferError:
                    p.poll(0.05)
        assert p.flush(120) == 0
    return time.perf_counter() - started


def loader_produce(bootstrap: str, topic: str, msgs: list[bytes], batch: int) -> float:
    """The loader reads its batches from a pipe, as it does under a supervisor (a raw
    descriptor: the SDK reads the next batch while the last is acknowledged)."""
    data = b"".join(b"".join(m + b"\n" for m in msgs[i : i + batch]) + b"\x17" for i in range(0, len(msgs), batch))
    worker = KafkaLoader(LoadOptions(bootstrap=bootstrap, topic=topic))
    sc = Scenario(type="L", mode="batch", batch_size=batch)
    read_end, write_end = os.pipe()
    grow_pipe(write_end)
    feeder = threading.Thread(target=_write_all, args=(write_end, data), daemon=True)
    started = time.perf_counter()
    feeder.start()
    with open(read_end, "rb", buffering=0) as stdin:
        serve(worker, stdin=stdin, stdout=NullSink(), scenario=sc)
    elapsed = time.perf_counter() - started
    feeder.join()
    return elapsed


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    try:
        while view:
            view = view[os.write(fd, view[: 1 << 20]) :]
    finally:
        os.close(fd)


def bare_consume(bootstrap: str, topic: str, n: int) -> float:
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"bare-{next(_ids)}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            **FETCH_TUNING,  # the extractor's client settings: the loops differ in what they do
        }
    )
    started = time.perf_counter()
    c.subscribe([topic])
    got = 0
    while got < n:
        got += sum(1 for m in c.consume(10000, 1.0) if m.error() is None)
    elapsed = time.perf_counter() - started
    c.close()
    return elapsed


def bare_consume_framed(bootstrap: str, topic: str, n: int) -> float:
    """A second, fairer baseline: the bare loop that also writes each batch's values as one
    block (EOM after each) to a null sink and commits synchronously after each batch."""
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"bare-framed-{next(_ids)}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            **FETCH_TUNING,
        }
    )
    sink = NullSink()
    started = time.perf_counter()
    c.subscribe([topic])
    got = 0
    while got < n:
        values = [m.value() or b"" for m in c.consume(10000, 1.0) if m.error() is None]
        if values:
            sink.write(b"\n".join([*values, b""]))
            c.commit(asynchronous=False)
            got += len(values)
    elapsed = time.perf_counter() - started
    c.close()
    return elapsed


def extractor_consume(bootstrap: str, topic: str, n: int) -> float:
    worker = KafkaExtractor(Options(bootstrap=bootstrap, topics=[topic], group=f"ext-{next(_ids)}"))
    sink = NullSink()
    started = time.perf_counter()
    requests = Requests(lambda: worker.records_out >= n)
    serve(worker, stdin=requests, stdout=sink, scenario=Scenario(type="E", mode="cyclic"))  # type: ignore[arg-type]
    elapsed = requests.at - started  # not the last window's commit nor leaving the group: the bare loop does neither
    assert worker.records_out >= n, (worker.records_out, n)
    return elapsed


class _Record:
    """What the extractor reads of a confluent_kafka.Message (Python methods: dearer than C's)."""

    __slots__ = ("_eof", "_offset", "_value")

    def __init__(self, offset: int, value: bytes, eof: Any = None) -> None:
        self._offset, self._value, self._eof = offset, value, eof

    def error(self) -> Any:
        return self._eof

    def topic(self) -> str:
        return "stand-in"

    def partition(self) -> int:
        return 0

    def offset(self) -> int:
        return self._offset

    def value(self) -> bytes:
        return self._value

    def key(self) -> None:
        return None

    def headers(self) -> None:
        return None

    def timestamp(self) -> tuple[int, int]:
        return (1, 1_700_000_000_000)


class _EndOfPartition:
    def code(self) -> int:
        from confluent_kafka import KafkaError

        return KafkaError._PARTITION_EOF


class _StandInConsumer:
    def __init__(self, records: list[_Record]) -> None:
        self.records, self.at = records, 0

    def consume(self, n: int, timeout: float) -> list[_Record]:
        out = self.records[self.at : self.at + n]
        self.at += len(out)
        return out or [_Record(self.at, b"", _EndOfPartition())]

    def commit(self, offsets: Any = None, asynchronous: bool = False) -> Any:
        return offsets

    def close(self) -> None:
        pass


class _StandInExtractor(KafkaExtractor):
    def setup(self) -> None:
        from etlstage_workers.kafka.framing import Framer

        self.framer = Framer(self.scenario.markers)
        self.consumer = _StandInConsumer(self.options_records)
        self._assigned, self._assignment_known = {("stand-in", 0)}, True


def extractor_own_work(n: int, size: int) -> float:
    """Seconds of the extractor's own work for ``n`` records of ``size`` bytes (no client)."""
    worker = _StandInExtractor(Options(bootstrap="stand-in", topics=["stand-in"], group="stand-in"))
    worker.options_records = [_Record(i, m) for i, m in enumerate(messages(n, size))]
    requests = Requests(lambda: worker.records_out >= n)
    started = time.perf_counter()
    serve(worker, stdin=requests, stdout=NullSink(), scenario=Scenario(type="E", mode="cyclic"))  # type: ignore[arg-type]
    return requests.at - started


CONSUMERS: dict[str, Callable[[str, str, int], float]] = {
    "bare consume": bare_consume,
    "bare framed": bare_consume_framed,
    "extractor": extractor_consume,
}


def _old_holds_eom(messages: list[bytes], block: bytes, eom: int, eom_bytes: bytes) -> bool:
    """The SDK's stray-EOM check before 2026-11-26: the marker searched for as bytes."""
    if len(block) > 512 * len(messages):
        return any(map(operator.contains, messages, itertools.repeat(eom_bytes)))
    return block.count(eom_bytes) != len(messages)


def eom_check_ab(bootstrap: str, topic: str, n: int, rounds: int) -> None:
    new = framing._holds_eom
    rows: dict[str, list[float]] = {"bare consume": [], "extractor, old check": [], "extractor, new check": []}
    for r in range(rounds):
        for name in list(rows) if r % 2 == 0 else list(rows)[::-1]:
            if name == "bare consume":
                rows[name].append(bare_consume(bootstrap, topic, n))
                continue
            framing._holds_eom = _old_holds_eom if "old" in name else new  # type: ignore[assignment]
            try:
                rows[name].append(extractor_consume(bootstrap, topic, n))
            finally:
                framing._holds_eom = new
    for name, times in rows.items():
        print(f"{name:>22}: best {n / min(times):>9,.0f} rec/s; runs {', '.join(f'{t:.2f}s' for t in times)}")
    for name in list(rows)[1:]:
        ratios = (bare / ext for bare, ext in zip(rows["bare consume"], rows[name], strict=True))
        print(f"{name} / bare consume, round by round: {', '.join(f'{x:.0%}' for x in ratios)}")


@contextlib.contextmanager
def _broker(parent: str | None) -> Iterator[Broker]:
    with (
        tempfile.TemporaryDirectory(dir=parent, prefix="etlstage-bench-kafka-") as d,
        Broker(d, heap_mb=1024, quick_start=False) as b,
    ):
        yield b


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=100_000)
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--batch", type=int, default=5000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--no-broker", action="store_true", help="only the extractor's own work (3.)")
    ap.add_argument("--eom-check-ab", type=int, metavar="ROUNDS", help="the extractor, old and new EOM check, in turn")
    ap.add_argument("--broker-dir", default="/dev/shm" if os.path.isdir("/dev/shm") else None)
    ns = ap.parse_args()
    # the extractor's setup tunes this process's malloc; done first, every loop runs with it
    keep_freed_memory()
    if ns.eom_check_ab:
        with _broker(ns.broker_dir) as broker:
            create_topic(broker.bootstrap, "bench-source", ns.partitions)
            bare_produce(broker.bootstrap, "bench-source", messages(ns.records, ns.size), ns.batch)
            bare_consume(broker.bootstrap, "bench-source", ns.records)  # warm-up
            eom_check_ab(broker.bootstrap, "bench-source", ns.records, ns.eom_check_ab)
        return
    own = min(extractor_own_work(ns.records, ns.size) for _ in range(ns.runs))
    print(
        f"extractor's own work (stand-in consumer): {ns.records / own:,.0f} rec/s ({own / ns.records * 1e6:.1f} µs/record)"
    )
    if ns.no_broker:
        return
    msgs = messages(ns.records, ns.size)
    rows: dict[str, list[float]] = {
        "bare produce": [],
        "loader": [],
        "bare consume": [],
        "bare framed": [],
        "extractor": [],
    }
    with _broker(ns.broker_dir) as broker:
        b = broker.bootstrap
        admin = AdminClient({"bootstrap.servers": b})
        source = "bench-source"
        create_topic(b, source, ns.partitions)
        bare_produce(b, source, msgs, ns.batch)  # the records both readers read
        bare_consume(b, source, ns.records)  # warm-up: the group coordinator's topic is created on first use
        for run in range(ns.runs):
            first = run % 2 == 0
            for name in ("bare produce", "loader") if first else ("loader", "bare produce"):
                topic = f"bench-out-{next(_ids)}"
                create_topic(b, topic, ns.partitions)
                fn = bare_produce if name == "bare produce" else loader_produce
                rows[name].append(fn(b, topic, msgs, ns.batch))
                admin.delete_topics([topic])[topic].result(60)
            readers = ("bare consume", "bare framed", "extractor")
            for name in readers if first else readers[::-1]:
                rows[name].append(CONSUMERS[name](b, source, ns.records))
    print(f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC; {ns.records} records of {ns.size} B, {ns.partitions} partitions")
    for name, times in rows.items():
        best = min(times)
        print(f"{name:>13}: best {ns.records / best:>9,.0f} rec/s  runs {', '.join(f'{t:.2f}s' for t in times)}")
    for worker, bare in (("loader", "bare produce"), ("extractor", "bare consume"), ("extractor", "bare framed")):
        ratios = [b / w for b, w in zip(rows[bare], rows[worker], strict=True)]
        print(
            f"{worker} / {bare}: best {min(rows[bare]) / min(rows[worker]):.0%}, "
            f"median {statistics.median(rows[bare]) / statistics.median(rows[worker]):.0%}; "
            f"run by run {', '.join(f'{r:.0%}' for r in ratios)}"
        )


if __name__ == "__main__":
    main()
