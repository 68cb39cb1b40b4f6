"""The test broker and the broker service a pipeline can start."""

from __future__ import annotations

import subprocess
import sys

import pytest
from etlstage_workers.kafka.broker import BOOTSTRAP_ENV

from tests.support.kafka import consume_all, produce


@pytest.mark.slow  # a JVM
def test_broker_keeps_records_across_a_restart(broker, topic):
    name = topic(2)
    produce(broker.bootstrap, name, [(b"k%d" % i, b"v%d" % i) for i in range(20)])
    broker.restart()
    assert sorted(consume_all(broker.bootstrap, name, idle=1.0)) == sorted(b"v%d" % i for i in range(20))


@pytest.mark.slow  # a JVM
def test_broker_service_prints_its_address_then_ready_and_stops_when_stdin_closes(tmp_path):
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "etlstage_workers.kafka.broker",
            "--service",
            "--topic",
            "demo:2",
            "--dir",
            str(tmp_path),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None and proc.stdin is not None
        export = proc.stdout.readline().strip()  # blocks until the broker is up (bounded by its --timeout)
        assert export.startswith(f"{BOOTSTRAP_ENV}=127.0.0.1:"), export
        assert proc.stdout.readline().strip() == "READY"
        bootstrap = export.partition("=")[2]
        produce(bootstrap, "demo", [(None, b"x")])
        assert consume_all(bootstrap, "demo", idle=1.0) == [b"x"]
        proc.stdin.close()
        assert proc.wait(60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
