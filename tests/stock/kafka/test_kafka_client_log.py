"""librdkafka's repeated lines are counted, not all shown: an unreachable broker does not bury the log."""

from __future__ import annotations

import logging
import subprocess
import sys
import time

from etlstage_workers.kafka.clientlog import LibrdkafkaRepeats

from tests.support.paths import ROOT


def _record(message: str, level: int = logging.ERROR) -> logging.LogRecord:
    return logging.LogRecord("etlstage.kafka.librdkafka", level, __file__, 1, message, (), None)


def test_a_repeated_line_is_shown_once_a_window_then_with_the_count_left_out():
    now = [0.0]
    repeats = LibrdkafkaRepeats(every=60, clock=lambda: now[0])
    shown = []
    for i in range(100):
        now[0] = i * 0.05
        record = _record(
            f"Connect to 127.0.0.1:9 failed (after {i}ms in state CONNECT, {i} identical error(s) suppressed)"
        )
        if repeats.filter(record):
            shown.append(record.getMessage())
    assert len(shown) == 1
    now[0] = 61.0
    record = _record("Connect to 127.0.0.1:9 failed (after 7ms in state CONNECT)")
    assert repeats.filter(record)
    assert "[1 of 100 like this in the last 61s]" in record.getMessage()  # 99 held back, and this one


def test_different_lines_and_levels_each_go_through():
    repeats = LibrdkafkaRepeats(every=60, clock=lambda: 0.0)
    assert repeats.filter(_record("broker down"))
    assert repeats.filter(_record("broker down", logging.WARNING))
    assert repeats.filter(_record("coordinator unknown"))
    assert not repeats.filter(_record("broker down"))


def test_an_unreachable_broker_writes_a_few_lines_not_twenty_a_second():
    """The real extractor against a closed port for 4 s: librdkafka tries ~20 times a second."""
    code = (
        "import logging, sys, time\n"
        "logging.basicConfig(stream=sys.stderr, level=logging.INFO)\n"
        "from confluent_kafka import Consumer\n"
        "from etlstage_workers.kafka.clientlog import client_logger\n"
        "c = Consumer({'bootstrap.servers': '127.0.0.1:9', 'group.id': 'g'},"
        " logger=client_logger())\n"
        "c.subscribe(['t'])\n"
        "end = time.monotonic() + 4\n"
        "while time.monotonic() < end: c.poll(0.1)\n"
    )
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert time.monotonic() - started < 30
    failures = [line for line in done.stderr.splitlines() if "Connection refused" in line]
    assert 1 <= len(failures) <= 3, done.stderr[-2000:]
