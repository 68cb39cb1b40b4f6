"""The Kafka extractor as a real process against a real broker: windows, commits on the
next request, the envelope, start positions, rebalances, new partitions, a broker restart."""

from __future__ import annotations

import json
import time

import pytest

from tests.support.kafka import produce
from tests.support.waiting import wait_for

pytestmark = pytest.mark.slow  # a JVM broker per module

MOD = "etlstage_workers.kafka"


def _args(broker, topic, group, *more):
    # the broker's least session timeout: a killed worker's partitions are free again sooner
    quick = ["--config", "session.timeout.ms=6000", "--config", "heartbeat.interval.ms=1000"]
    return [
        "--bootstrap",
        broker.bootstrap,
        "--topic",
        topic,
        "--group",
        group,
        "--max-cycle-seconds",
        "0.5",
        *quick,
        *more,
    ]


def drain(worker, until_empty: int = 1, limit: int = 200) -> list[bytes]:
    """Cycles until ``until_empty`` empty ones in a row; every message read."""
    out: list[bytes] = []
    empty = 0
    for _ in range(limit):
        got = worker.cycle()
        out += got
        empty = 0 if got else empty + 1
        if empty >= until_empty:
            return out
    raise AssertionError(f"still reading after {limit} cycles")


def test_every_record_once_then_an_empty_cycle(broker, topic, spawn, tmp_path):
    name = topic(3)
    values = [b"v%d" % i for i in range(300)]
    produce(broker.bootstrap, name, [(b"k%d" % i, v) for i, v in enumerate(values)])
    w = spawn(MOD, _args(broker, name, "g-once"), str(tmp_path))
    got = drain(w)
    assert sorted(got) == sorted(values)
    assert w.close_stdin() == 0


def test_offsets_are_committed_only_when_the_next_request_comes(broker, topic, spawn, tmp_path):
    name = topic(2)
    produce(broker.bootstrap, name, [(b"k%d" % i, b"a%d" % i) for i in range(50)])
    w = spawn(MOD, _args(broker, name, "g-commit"), str(tmp_path))
    first = drain(w)  # the last request (the empty cycle's) acknowledged the rest
    assert sorted(first) == sorted(b"a%d" % i for i in range(50))
    w.kill()
    # everything was acknowledged by a later request: nothing comes again
    w = spawn(MOD, _args(broker, name, "g-commit"), str(tmp_path))
    assert drain(w) == []
    produce(broker.bootstrap, name, [(b"k", b"b%d" % i) for i in range(20)])
    window = []
    while not window:
        window = w.cycle()  # read, never acknowledged
    w.kill()
    w = spawn(MOD, _args(broker, name, "g-commit"), str(tmp_path))
    again = drain(w)
    assert set(window) <= set(again)  # the unacknowledged window is read again
    assert sorted(again) == sorted(b"b%d" % i for i in range(20))
    assert w.close_stdin() == 0


def test_envelope_carries_key_headers_partition_offset_and_timestamp(broker, topic, spawn, tmp_path):
    from confluent_kafka import Producer

    name = topic(1)
    p = Producer({"bootstrap.servers": broker.bootstrap})
    p.produce(
        name, key=b"k1", value=b'{"id":1}', headers=[("trace", b"abc"), ("bin", b"\xff")], timestamp=1700000000123
    )
    p.produce(name, key=None, value=b"\xff\x00 not utf-8")
    assert p.flush(30) == 0
    w = spawn(MOD, [*_args(broker, name, "g-env"), "--envelope"], str(tmp_path))
    got = [json.loads(m) for m in drain(w)]
    assert got[0] == {
        "topic": name,
        "partition": 0,
        "offset": 0,
        "timestamp": 1700000000123,
        "timestampType": "create",
        "key": "k1",
        "keyEncoding": "utf8",
        "headers": [["trace", "abc", "utf8"], ["bin", "/w==", "base64"]],
        "data": '{"id":1}',
        "dataEncoding": "utf8",
    }
    assert got[1]["key"] is None and got[1]["dataEncoding"] == "base64" and got[1]["offset"] == 1


def test_a_value_holding_a_marker_is_enveloped_not_split(broker, topic, spawn, tmp_path):
    name = topic(1)
    produce(broker.bootstrap, name, [(None, b"plain"), (None, b"two\nlines"), (None, b'{"a": "x"}\n')])
    w = spawn(MOD, _args(broker, name, "g-marker"), str(tmp_path))
    got = drain(w)
    assert got[0] == b"plain" and got[2] == b'{"a":"x"}'
    assert json.loads(got[1])["dataEncoding"] == "base64"


def test_latest_skips_old_records_and_a_restart_before_any_window_loses_nothing(broker, topic, spawn, tmp_path):
    name = topic(1)
    produce(broker.bootstrap, name, [(None, b"old")])
    w = spawn(MOD, [*_args(broker, name, "g-latest"), "--start", "latest"], str(tmp_path))
    assert drain(w) == []  # assigned, at the end: the start is pinned (committed)
    w.kill()
    produce(broker.bootstrap, name, [(None, b"new")])  # while no worker runs
    w = spawn(MOD, [*_args(broker, name, "g-latest"), "--start", "latest"], str(tmp_path))
    assert drain(w) == [b"new"]


def test_timestamp_start(broker, topic, spawn, tmp_path):
    from confluent_kafka import Producer

    name = topic(1)
    p = Producer({"bootstrap.servers": broker.bootstrap})
    now = int(time.time())  # recent times: the broker deletes records past its retention (7 days)
    for i, ts in enumerate((now - 3000, now - 2000, now - 1000)):
        p.produce(name, value=b"t%d" % i, timestamp=ts * 1000)
    assert p.flush(30) == 0
    start = str(now - 2000)
    w = spawn(MOD, [*_args(broker, name, "g-ts"), "--start", "timestamp", "--timestamp", start], str(tmp_path))
    assert drain(w) == [b"t1", b"t2"]


def test_bad_options_exit_2_naming_the_value(tmp_path):
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-m", MOD, "--topic", "x", "--max-records-per-cycle", "0"],
        capture_output=True,
        text=True,
        timeout=60,
        env={"ETLSTAGE_TYPE": "E", "ETLSTAGE_MODE": "cyclic", "PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 2, done.stderr
    assert "--max-records-per-cycle 0" in done.stderr and "--bootstrap" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_second_instance_joining_and_leaving_loses_nothing(broker, topic, spawn, tmp_path):
    """A rebalance while windows are open: every record arrives, and each partition's
    records arrive in order within each instance's stream."""
    name = topic(4)
    values = [b"r%04d" % i for i in range(2000)]
    produce(broker.bootstrap, name, [(b"k%d" % (i % 16), v) for i, v in enumerate(values)])
    args = [*_args(broker, name, "g-rebalance"), "--max-records-per-cycle", "100"]
    a = spawn(MOD, args, str(tmp_path / "a"), instance=0, instances=2)
    got = a.cycle() + a.cycle()
    b = spawn(MOD, args, str(tmp_path / "b"), instance=1, instances=2)
    # both take turns while the group rebalances
    for _ in range(6):
        got += a.cycle() + b.cycle()
    assert b.close_stdin() == 0  # leaves: its partitions go back to a; its open window is read again
    # b's partitions come back to a after a rebalance; till then a may find its own at their end
    wait_for(lambda: got.extend(a.cycle()) or set(got) >= set(values), within=60, what="every record")
    assert drain(a) == []
    assert len(got) < len(values) + 500  # duplicates only of the windows open at a rebalance


def test_a_new_partition_is_read(broker, topic, spawn, tmp_path):
    from confluent_kafka.admin import AdminClient, NewPartitions

    name = topic(1)
    produce(broker.bootstrap, name, [(None, b"p0")])
    w = spawn(
        MOD, [*_args(broker, name, "g-grow"), "--config", "topic.metadata.refresh.interval.ms=500"], str(tmp_path)
    )
    assert drain(w) == [b"p0"]
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_partitions([NewPartitions(name, 2)])[name].result(30)
    produce(broker.bootstrap, name, [(None, b"p1")], partition=1)
    got: list[bytes] = []
    wait_for(lambda: got.extend(w.cycle()) or got, within=60, what="the new partition's record")
    assert got == [b"p1"]


def test_a_broker_restart_loses_nothing(broker, topic, spawn, tmp_path):
    name = topic(2)
    produce(broker.bootstrap, name, [(b"k%d" % i, b"x%d" % i) for i in range(100)])
    w = spawn(MOD, [*_args(broker, name, "g-restart"), "--max-records-per-cycle", "30"], str(tmp_path))
    got = w.cycle()
    broker.restart()
    produce(broker.bootstrap, name, [(b"k%d" % i, b"y%d" % i) for i in range(100)])
    want = {b"x%d" % i for i in range(100)} | {b"y%d" % i for i in range(100)}
    # the consumer reconnects on its own; till then its partitions may look caught up
    wait_for(lambda: got.extend(w.cycle()) or set(got) >= want, within=90, what="every record")
    assert set(got) == want and len(got) <= len(want) + 2 * 30  # at most the open windows again
