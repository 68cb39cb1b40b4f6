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


class WorkerProcess:
    """A stock Kafka worker (``module``) as a real child: ETLSTAGE_* env; E: ``\\n`` per cycle, read to EOP."""

    def __init__(
        self,
        module: str,
        args: list[str],
        state_dir: str,
        *,
        kind: str = "E",
        mode: str = "cyclic",
        instance: int = 0,
        instances: int = 1,
        batch_size: int = 1000,
    ) -> None:
        import os
        import subprocess
        import sys
        import time
        from pathlib import Path

        from etlstage.protocol.scenario import Scenario
        from etlstage.protocol.vocabulary import Mode, StageType

        root = Path(__file__).resolve().parents[2]
        scenario = Scenario(
            StageType(kind), Mode(mode), stage="stage", instance=instance, instances=instances, batch_size=batch_size
        )
        env = {**os.environ, **scenario.to_env(), "ETLSTAGE_STATE_DIR": state_dir}
        env["PYTHONPATH"] = str(root) + os.pathsep + env.get("PYTHONPATH", "")
        Path(state_dir).mkdir(parents=True, exist_ok=True)
        self.stderr_path = Path(state_dir) / f"stderr-{time.monotonic_ns()}.log"
        self._stderr = open(self.stderr_path, "wb")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", module, *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            env=env,
        )

    def ask(self, payload: bytes, timeout: float = 60.0) -> list[bytes]:
        """Write ``payload`` (a request, or a batch and its EOB), read to the next EOP."""
        import os
        import time

        assert self.proc.stdin and self.proc.stdout
        self.proc.stdin.write(payload)
        self.proc.stdin.flush()
        buf = bytearray()
        deadline = time.monotonic() + timeout
        while not buf.endswith(b"\x00"):
            if time.monotonic() > deadline:
                raise TimeoutError(f"no EOP within {timeout} s; stderr:\n{self.stderr()}")
            chunk = os.read(self.proc.stdout.fileno(), 1 << 16)
            if not chunk:
                raise EOFError(f"worker exited (status {self.proc.poll()}) mid-cycle; stderr:\n{self.stderr()}")
            buf += chunk
        body = bytes(buf[:-1])
        assert b"\x00" not in body, "EOP inside a window"
        return body.split(b"\n")[:-1] if body else []

    def cycle(self, timeout: float = 60.0) -> list[bytes]:
        return self.ask(b"\n", timeout)

    def load(self, messages: list[bytes], timeout: float = 60.0) -> None:
        assert self.ask(b"".join(m + b"\n" for m in messages) + b"\x17", timeout) == []

    def close_stdin(self, timeout: float = 30.0) -> int:
        assert self.proc.stdin
        self.proc.stdin.close()
        code = self.proc.wait(timeout)
        self._stderr.close()
        return code

    def kill(self) -> None:
        import signal

        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)
        self._stderr.close()

    def stderr(self) -> str:
        if not self._stderr.closed:
            self._stderr.flush()
        return self.stderr_path.read_text(errors="replace")[-4000:]


@pytest.fixture
def spawn() -> Any:
    """``spawn(module, args, state_dir, ...)`` -> a :class:`WorkerProcess`; leftovers killed at the end."""
    started: list[WorkerProcess] = []

    def make(*args: Any, **kwargs: Any) -> WorkerProcess:
        w = WorkerProcess(*args, **kwargs)
        started.append(w)
        return w

    yield make
    for w in started:
        if w.proc.poll() is None:
            w.kill()
