"""A real Kafka broker for tests: one per test module (a JVM costs seconds and memory).

``broker`` (module-scoped fixture): a started :class:`Broker` on loopback; ``topic(n)``
makes a fresh topic with ``n`` partitions; ``produce``/``consume_all`` are plain
confluent-kafka loops the tests compare the workers with.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import pytest
from etlstage_workers.kafka.broker import Broker, create_topic

from tests.support.worker_child import WorkerChild, spawner

_names = itertools.count()


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    b = Broker(str(tmp_path_factory.mktemp("kafka-broker"))).start()
    try:
        yield b
    finally:
        b.stop()


@pytest.fixture
def topic(broker: Broker, request: pytest.FixtureRequest) -> Any:
    """``topic(partitions=1)`` -> the name of a fresh topic."""

    def make(partitions: int = 1) -> str:
        name = f"t{next(_names)}-{request.node.name[:40]}".replace("[", "-").replace("]", "")
        create_topic(broker.bootstrap, name, partitions)
        return name

    return make


def produce(
    bootstrap: str, topic: str, records: list[tuple[bytes | None, bytes]], partition: int | None = None
) -> None:
    """Every (key, value) written and acknowledged (acks=all)."""
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True, "linger.ms": 5})
    failed: list[object] = []

    def done(err: object, _msg: object) -> None:
        if err is not None:
            failed.append(err)

    for key, value in records:
        kwargs: dict[str, Any] = {"key": key, "value": value, "on_delivery": done}
        if partition is not None:
            kwargs["partition"] = partition
        while True:
            try:
                p.produce(topic, **kwargs)
                break
            except BufferError:
                p.poll(0.1)
    assert p.flush(60) == 0, "messages left unacknowledged after 60 s"
    assert not failed, failed


def consume_all(bootstrap: str, topic: str, *, committed_only: bool = True, idle: float = 3.0) -> list[bytes]:
    """Every value in ``topic`` from the start (read_committed by default), read until
    ``idle`` seconds pass with every partition at its end."""
    import time

    from confluent_kafka import Consumer

    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"check-{next(_names)}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "isolation.level": "read_committed" if committed_only else "read_uncommitted",
        }
    )
    c.subscribe([topic])
    out: list[bytes] = []
    quiet_since = time.monotonic()
    deadline = time.monotonic() + 120
    try:
        while time.monotonic() - quiet_since < idle and time.monotonic() < deadline:
            got = c.consume(1000, 0.5)
            values = [m.value() for m in got if m.error() is None]
            if values or not c.assignment():
                quiet_since = time.monotonic()
            out += values
    finally:
        c.close()
    return out


@pytest.fixture
def spawn() -> Iterator[Any]:
    """``spawn(module, args, state_dir, ...)`` -> a :class:`WorkerChild`; leftovers killed at the end."""
    yield from spawner(WorkerChild)
