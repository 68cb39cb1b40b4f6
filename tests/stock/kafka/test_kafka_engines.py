"""One stages.yaml, Kafka in and Kafka out, on both engines: every record once. Under the
Spark engine the two stages run as their worker processes (the generic extract source and
load writer drive them with the same protocol; ``native: false``: Spark's own Kafka source
is tested through the CLI in test_kafka_spark_native.py)."""

from __future__ import annotations

import pytest

from tests.support.engines import ENGINES, Engine
from tests.support.kafka import consume_all, produce


@pytest.mark.slow  # a JVM broker
@pytest.mark.parametrize("engine", ENGINES)
def test_kafka_to_kafka_moves_every_record_once(engine, broker, topic, request, tmp_path):
    src, dst = topic(2), topic(1)
    records = [b'{"id":%d}' % i for i in range(400)]
    produce(broker.bootstrap, src, [(b"k%d" % (i % 7), r) for i, r in enumerate(records)])
    b = broker.bootstrap
    code, log = Engine(engine, request, tmp_path).run(f"""
stages:
  - name: read
    type: E
    mode: cyclic
    native: false
    command: [etlstage-kafka, --bootstrap, "{b}", --topic, {src}, --group, g-{src}, --max-records-per-cycle, "150"]
  - name: write
    type: L
    mode: batch
    batch_size: 100
    command: [etlstage-kafka-load, --bootstrap, "{b}", --topic, {dst}, --transactional, --transactional-id, tx-{dst}]
""")
    assert code == 0, log[-3000:]
    got = consume_all(b, dst, idle=1.0)
    assert sorted(got) == sorted(records)
