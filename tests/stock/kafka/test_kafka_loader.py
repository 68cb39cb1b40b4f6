"""The Kafka loader as a real process against a real broker: acknowledged only once the
broker has the batch; transactional batches never written twice across crashes."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.support.kafka import consume_all

pytestmark = pytest.mark.slow  # a JVM broker per module

LOAD = "etlstage_workers.kafka.load_cli"


def test_a_batch_is_acknowledged_once_every_message_is_in_the_topic(broker, topic, spawn, tmp_path):
    name = topic(3)
    # a long linger: only the flush before the EOP sends the batch at once
    args = ["--bootstrap", broker.bootstrap, "--topic", name, "--key", "/k", "--linger-ms", "20000"]
    w = spawn(LOAD, args, str(tmp_path), kind="L", mode="batch")
    batch = [json.dumps({"k": i % 5, "n": i}).encode() for i in range(500)]
    w.load(batch)  # EOP came back
    # no waiting: what was acknowledged is in the topic now
    assert sorted(consume_all(broker.bootstrap, name, idle=1.0)) == sorted(batch)
    # the report written with the EOP counts the batch (flushed in a thread of its own)
    (report,) = tmp_path.glob("report-0-*.json")
    said = json.loads(report.read_text())
    assert said.pop("output").startswith("Kafka topic ")  # where the data went, for the run's end
    assert said == {"written": 500, "batches": 1}
    assert w.close_stdin() == 0


def test_an_unreachable_broker_never_acknowledges(topic, tmp_path, spawn):
    from etlstage_workers.kafka.broker import free_port

    args = ["--bootstrap", f"127.0.0.1:{free_port()}", "--topic", "nowhere", "--config", "message.timeout.ms=2000"]
    w = spawn(LOAD, args, str(tmp_path), kind="L", mode="batch")
    with pytest.raises(EOFError):  # exits 1 without EOP: the supervisor sends the batch again
        w.load([b"lost?"], timeout=60)
    assert w.proc.wait(10) == 1
    assert "not acknowledged" in w.stderr() or "refused" in w.stderr()


def test_transactional_replay_of_a_committed_batch_writes_nothing_twice(broker, topic, spawn, tmp_path):
    name = topic(2)
    args = ["--bootstrap", broker.bootstrap, "--topic", name, "--transactional", "--transactional-id", f"tx-{name}"]
    w = spawn(LOAD, args, str(tmp_path), kind="L", mode="batch")
    first = [b"a%d" % i for i in range(100)]
    w.load(first)
    w.kill()  # as if killed after its commit, before the supervisor saw the EOP
    w = spawn(LOAD, args, str(tmp_path), kind="L", mode="batch")
    w.load(first)  # sent again: nothing written
    # the window read again after a pipeline crash, cut into other batches
    w.load(first[50:] + [b"b%d" % i for i in range(50)])
    w.load([b"b%d" % i for i in range(100)])
    assert w.close_stdin() == 0
    got = consume_all(broker.bootstrap, name, idle=1.0)
    want = first + [b"b%d" % i for i in range(100)]
    assert sorted(got) == sorted(want) and len(got) == len(want)


def test_a_transaction_left_open_by_a_killed_loader_is_never_seen(broker, topic, spawn, tmp_path):
    """A loader died inside its transaction (messages sent, not committed): the restarted
    loader (same transactional id) aborts it; read_committed readers see the batch once."""
    from confluent_kafka import Producer

    name = topic(1)
    tid = f"tx-{name}"
    batch = [b"c%d" % i for i in range(50)]
    dead = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": tid})
    dead.init_transactions(30)
    dead.begin_transaction()
    for m in batch:
        dead.produce(name, m)
    assert dead.flush(30) == 0  # in the topic, uncommitted; the producer is never used again
    assert consume_all(broker.bootstrap, name, committed_only=False, idle=1.0) == batch
    args = ["--bootstrap", broker.bootstrap, "--topic", name, "--transactional", "--transactional-id", tid]
    w = spawn(LOAD, args, str(tmp_path), kind="L", mode="batch")
    w.load(batch)
    assert w.close_stdin() == 0
    assert consume_all(broker.bootstrap, name, idle=1.0) == batch


def test_a_fenced_loader_fails_its_batch_in_one_clear_line(broker, topic, spawn, tmp_path):
    """Another producer with the loader's transactional id (two live loaders sharing one id)
    fences it: the loader's next batch fails with a line that says so (no traceback of
    confluent-kafka's), unacknowledged and not committed; the restarted loader writes it once."""
    from confluent_kafka import Producer

    name = topic(1)
    tid = f"tx-{name}"
    args = ["--bootstrap", broker.bootstrap, "--topic", name, "--transactional", "--transactional-id", tid]
    w = spawn(LOAD, args, str(tmp_path), kind="L", mode="batch")
    first = [b"f%d" % i for i in range(50)]
    w.load(first)
    other = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": tid})
    other.init_transactions(30)  # the broker fences the loader's producer
    second = [b"s%d" % i for i in range(50)]
    with pytest.raises(EOFError):  # exits without the batch's EOP: the supervisor sends it again
        w.load(second)
    assert w.proc.wait(30) == 1
    said = w.stderr()
    assert f"another loader with transactional id '{tid}' started and fenced this one" in said, said
    assert "give each instance its own --transactional-id" in said, said
    assert "Traceback" not in said and "SystemError" not in said, said
    assert sorted(consume_all(broker.bootstrap, name, idle=1.0)) == sorted(first)  # nothing of it committed
    w = spawn(LOAD, args, str(tmp_path), kind="L", mode="batch")
    w.load(second)  # sent again to the restarted loader
    assert w.close_stdin() == 0
    got = consume_all(broker.bootstrap, name, idle=1.0)
    assert sorted(got) == sorted(first + second) and len(got) == len(first + second)


def test_bad_options_exit_2(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", LOAD, "--bootstrap", "x:1", "--topic", "t", "--key", "nope", "--ledger-batches", "0"],
        capture_output=True,
        text=True,
        timeout=60,
        env={"ETLSTAGE_TYPE": "L", "ETLSTAGE_MODE": "batch", "PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 2, done.stderr
    assert "--key" in done.stderr and "--ledger-batches 0" in done.stderr and "Traceback" not in done.stderr
