"""Kafka workers' speed against bare confluent-kafka loops, in one run on one broker.

    python bench/kafka.py [--records 100000] [--size 1024] [--partitions 4] [--runs 3]

A one-node broker (``etlstage-kafka-broker``'s, on loopback) holds the topics.

1. Produce. (a) a bare loop: ``Producer.produce`` per message (``acks=all``, idempotent,
   the loader's settings), one ``flush`` at the end of each batch of ``--batch`` messages;
   (b) ``etlstage-kafka-load`` through ``serve()``: the same messages as protocol batches
   (EOB after each), acknowledged once flushed. Target: loader >= 80 % of the bare loop.
2. Consume. (a) a bare loop: a fresh consumer group, ``consume(10000)`` until every
   record is read; (b) the extractor in cyclic mode through ``serve()`` (framing, marker
   checks, the commit of each window on the next request), output to a null sink, until
   an empty cycle. Target: extractor >= 80 % of the bare loop.

Runs alternate who goes first; the best of each is compared.
"""

from __future__ import annotations

import argparse
import io
import itertools
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient
from etlstage_workers.kafka.broker import Broker, create_topic
from etlstage_workers.kafka.extractor import KafkaExtractor
from etlstage_workers.kafka.loader import KafkaLoader
from etlstage_workers.kafka.options import LoadOptions, Options

from etlstage.protocol import Scenario
from etlstage.worker import serve

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
    data = b"".join(b"".join(m + b"\n" for m in msgs[i : i + batch]) + b"\x17" for i in range(0, len(msgs), batch))
    worker = KafkaLoader(LoadOptions(bootstrap=bootstrap, topic=topic))
    sc = Scenario(type="L", mode="batch", batch_size=batch)
    started = time.perf_counter()
    serve(worker, stdin=io.BytesIO(data), stdout=NullSink(), scenario=sc)  # type: ignore[arg-type]
    return time.perf_counter() - started


def bare_consume(bootstrap: str, topic: str, n: int) -> float:
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"bare-{next(_ids)}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
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


def extractor_consume(bootstrap: str, topic: str, n: int) -> float:
    worker = KafkaExtractor(Options(bootstrap=bootstrap, topics=[topic], group=f"ext-{next(_ids)}"))
    sink = NullSink()
    started = time.perf_counter()
    requests = Requests(lambda: worker.records_out >= n)
    serve(worker, stdin=requests, stdout=sink, scenario=Scenario(type="E", mode="cyclic"))  # type: ignore[arg-type]
    elapsed = requests.at - started  # not the last window's commit nor leaving the group: the bare loop does neither
    assert worker.records_out >= n, (worker.records_out, n)
    return elapsed


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=100_000)
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--batch", type=int, default=5000)
    ap.add_argument("--runs", type=int, default=3)
    ns = ap.parse_args()
    msgs = messages(ns.records, ns.size)
    rows: dict[str, list[float]] = {"bare produce": [], "loader": [], "bare consume": [], "extractor": []}
    with Broker(heap_mb=1024) as broker:
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
            for name in ("bare consume", "extractor") if first else ("extractor", "bare consume"):
                fn2 = bare_consume if name == "bare consume" else extractor_consume
                rows[name].append(fn2(b, source, ns.records))
    print(f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC; {ns.records} records of {ns.size} B, {ns.partitions} partitions")
    for name, times in rows.items():
        best = min(times)
        print(f"{name:>13}: best {ns.records / best:>9,.0f} rec/s  runs {', '.join(f'{t:.2f}s' for t in times)}")
    print(f"loader / bare produce:    {min(rows['bare produce']) / min(rows['loader']):.0%}")
    print(f"extractor / bare consume: {min(rows['bare consume']) / min(rows['extractor']):.0%}")


if __name__ == "__main__":
    main()
