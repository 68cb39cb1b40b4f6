"""A one-node Apache Kafka broker on loopback, for tests and local demos.

Apache Kafka's own jars from Maven Central (fetched once by :func:`etlstage.sparkapi.fetch_named`),
KRaft mode (no ZooKeeper): one JVM that is controller and broker at once, its storage
formatted with a fresh cluster id, on two free loopback ports. Start-up is bounded: the
broker is ready when a client sees it in the cluster's metadata.

``Broker().start()`` ... ``.stop()`` (or ``with Broker() as b``); ``restart()`` keeps the
ports and the data. ``etlstage-kafka-broker --service`` runs it as a ``services:`` entry:
it prints ``ETLSTAGE_KAFKA_BOOTSTRAP=127.0.0.1:PORT`` and ``READY``, and stops when its
stdin closes (the supervisor stopping its services) or on SIGTERM.
"""

from __future__ import annotations

import argparse
import base64
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from types import TracebackType

from etlstage.sparkapi import JarFetchError, fetch_named

BOOTSTRAP_ENV = "ETLSTAGE_KAFKA_BOOTSTRAP"


class BrokerError(RuntimeError):
    """The broker could not be started (the message holds the tail of its log)."""


class BrokerDirError(BrokerError):
    """``--dir`` names a folder that cannot be made or written: a usage error (exit 2)."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def cluster_id() -> str:
    """A KRaft cluster id: 16 random bytes, URL-safe base64 without padding, never starting
    with ``-`` (a command line would take it for an option; Kafka's own ids avoid it too)."""
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode("ascii").rstrip("=")
        if not text.startswith("-"):
            return text


class Broker:
    def __init__(
        self, workdir: str | None = None, *, heap_mb: int = 512, startup_timeout: float = 90.0, quick_start: bool = True
    ) -> None:
        """``quick_start``: the JVM compiles with C1 only and collects with the serial
        collector — it answers sooner, which is what tests and demos need; False keeps
        the JVM's own choices, for benchmarks, where the broker must keep up for minutes."""
        self._own_dir = workdir is None
        self.quick_start = quick_start
        self.dir = Path(workdir or tempfile.mkdtemp(prefix="etlstage-kafka-"))
        self.heap_mb = heap_mb
        self.startup_timeout = startup_timeout
        self.port = free_port()
        self.controller_port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self._classpath = ""

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def env(self) -> dict[str, str]:
        return {BOOTSTRAP_ENV: self.bootstrap}

    # --- life cycle ---------------------------------------------------------------------

    def start(self) -> Broker:
        self.make_dir()
        self._classpath = os.pathsep.join(str(j) for j in fetch_named("kafka-broker"))
        config = self._write_config()
        logs = self.dir / "logs"
        if not (logs / "meta.properties").exists():
            self._java(
                "kafka.tools.StorageTool", "format", f"--cluster-id={cluster_id()}", "-c", str(config), timeout=120
            )
        self._launch(config)
        return self

    def make_dir(self) -> None:
        """The data folder, made (with its parents) when it does not exist yet; an existing
        one is used as it is (a broker's data kept across starts)."""
        try:
            self.dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        except OSError as exc:
            raise BrokerDirError(f"--dir {self.dir}: cannot be made ({exc.strerror or exc})") from None
        if not os.access(self.dir, os.W_OK | os.X_OK):
            raise BrokerDirError(f"--dir {self.dir}: not a folder this user may write")

    def restart(self) -> None:
        """Stop and start again: same ports, same data (a broker restart as clients see it)."""
        self._terminate()
        self._launch(self.dir / "server.properties")

    def stop(self) -> None:
        self._terminate()
        if self._own_dir:
            shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> Broker:
        return self.start()

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()

    # --- internals ----------------------------------------------------------------------

    def _write_config(self) -> Path:
        path = self.dir / "server.properties"
        settings = {
            "process.roles": "broker,controller",
            "node.id": "1",
            "controller.quorum.voters": f"1@127.0.0.1:{self.controller_port}",
            "listeners": f"PLAINTEXT://127.0.0.1:{self.port},CONTROLLER://127.0.0.1:{self.controller_port}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
            "log.dirs": str(self.dir / "logs"),
            "num.partitions": "1",
            # one node: every internal topic has one replica
            "offsets.topic.replication.factor": "1",
            "offsets.topic.num.partitions": "4",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "transaction.state.log.num.partitions": "4",
            "share.coordinator.state.topic.replication.factor": "1",
            "share.coordinator.state.topic.min.isr": "1",
            "group.initial.rebalance.delay.ms": "0",
            "auto.create.topics.enable": "true",
        }
        path.write_text("".join(f"{k}={v}\n" for k, v in settings.items()))
        (self.dir / "log4j2.properties").write_text(
            "rootLogger.level = WARN\nrootLogger.appenderRef.stdout.ref = STDOUT\n"
            "appender.stdout.type = Console\nappender.stdout.name = STDOUT\n"
            "appender.stdout.layout.type = PatternLayout\n"
            "appender.stdout.layout.pattern = [%d] %p %m (%c)%n\n"
        )
        return path

    def _jvm(self, main: str, *args: str) -> list[str]:
        java = shutil.which("java")
        if java is None:
            raise BrokerError("java is not installed: the Kafka broker needs Java 17 or later")
        quick = ["-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1"] if self.quick_start else []
        return [
            java,
            f"-Xmx{self.heap_mb}m",
            *quick,
            f"-Dlog4j2.configurationFile={self.dir / 'log4j2.properties'}",
            "-cp",
            self._classpath,
            main,
            *args,
        ]

    def _java(self, main: str, *args: str, timeout: float) -> None:
        done = subprocess.run(self._jvm(main, *args), capture_output=True, text=True, timeout=timeout)
        if done.returncode != 0:
            raise BrokerError(f"{main} {' '.join(args)} failed:\n{(done.stdout + done.stderr)[-2000:]}")

    def _launch(self, config: Path) -> None:
        with open(self.dir / "broker.log", "ab") as log:
            self.proc = subprocess.Popen(
                self._jvm("kafka.Kafka", str(config)), stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
            )
        deadline = time.monotonic() + self.startup_timeout
        while not self._answers():
            if self.proc.poll() is not None:
                raise BrokerError(f"the Kafka broker exited with status {self.proc.returncode}:\n{self._log_tail()}")
            if time.monotonic() > deadline:
                self._terminate()
                within = f"{self.startup_timeout:g} s"
                raise BrokerError(f"the Kafka broker was not ready within {within}:\n{self._log_tail()}")
            time.sleep(0.2)

    def _answers(self) -> bool:
        """The broker is in the metadata a client receives (a bare port open is not enough)."""
        from confluent_kafka.admin import AdminClient

        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                pass
        except OSError:
            return False
        admin = AdminClient({"bootstrap.servers": self.bootstrap, "log_level": 0})
        try:
            return bool(admin.list_topics(timeout=2).brokers)
        except Exception:
            return False

    def _terminate(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)

    def _log_tail(self) -> str:
        path = self.dir / "broker.log"
        return path.read_text(errors="replace")[-3000:] if path.exists() else "(no log)"


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(
        prog="etlstage-kafka-broker",
        description="A one-node Apache Kafka broker (KRaft) on 127.0.0.1, for tests and local demos; "
        "prints its bootstrap address.",
    )
    p.add_argument("--dir", help="data and log folder (default: a temporary one, removed at the end)")
    p.add_argument("--topic", action="append", default=[], help="create this topic (NAME or NAME:PARTITIONS)")
    p.add_argument("--heap-mb", type=int, default=512)
    p.add_argument("--timeout", type=float, default=90.0, help="seconds the start may take")
    p.add_argument(
        "--service",
        action="store_true",
        help=f"run as an etlstage service: print {BOOTSTRAP_ENV}=HOST:PORT and READY; stop when stdin closes",
    )
    ns = p.parse_args(argv)
    done = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: done.set())
    try:
        broker = Broker(ns.dir, heap_mb=ns.heap_mb, startup_timeout=ns.timeout).start()
    except BrokerDirError as exc:
        print(f"etlstage-kafka-broker: {exc}", file=sys.stderr)
        sys.exit(2)
    except (BrokerError, JarFetchError) as exc:
        print(f"etlstage-kafka-broker: {exc}", file=sys.stderr)
        sys.exit(1)
    try:
        for spec in ns.topic:
            name, _, parts = spec.partition(":")
            create_topic(broker.bootstrap, name, int(parts or 1))
        if ns.service:
            print(f"{BOOTSTRAP_ENV}={broker.bootstrap}")
            print("READY", flush=True)

            def wait_for_eof() -> None:
                sys.stdin.read()
                done.set()

            threading.Thread(target=wait_for_eof, daemon=True).start()
        else:
            print(broker.bootstrap, flush=True)
        while not done.wait(0.5):
            if broker.proc is None or broker.proc.poll() is not None:
                print(f"etlstage-kafka-broker: the broker exited:\n{broker._log_tail()}", file=sys.stderr)
                sys.exit(1)
    finally:
        broker.stop()


def create_topic(bootstrap: str, name: str, partitions: int, timeout: float = 30.0) -> None:
    """Create ``name`` with ``partitions`` (one replica); an existing topic is left as it is."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    future = admin.create_topics([NewTopic(name, partitions, 1)], operation_timeout=timeout)[name]
    try:
        future.result(timeout)
    except KafkaException as exc:
        if exc.args[0].name() != "TOPIC_ALREADY_EXISTS":
            raise


if __name__ == "__main__":
    main()
