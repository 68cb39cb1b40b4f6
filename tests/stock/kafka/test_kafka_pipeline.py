"""Kafka -> slow pass-through T -> transactional Kafka loader under `etlstage run --once`,
with the supervisor and the Kafka workers killed (SIGKILL) at seeded moments while
windows are on their way: every record arrives in the output topic exactly once
(read_committed), and nothing is lost."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import time
from pathlib import Path

import psutil
import pytest

from tests.support.crash_points import POINTS, kill_at_each_point
from tests.support.kafka import consume_all, produce
from tests.support.run_cli import ETLSTAGE, RUN_ONCE
from tests.support.waiting import wait_for

N = 1500
KILLS = 6


class EndOffset:
    """The output topic's end offset: it grows with every committed (or aborted) transaction.
    Asked twenty times a second while a run goes on, through one client: a client made per
    question (threads, a connection, metadata) cost the broker's JVM and this process CPU
    that the pipeline under test needs."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        from confluent_kafka import Consumer, TopicPartition

        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "peek"})
        self.partition = TopicPartition(topic, 0)

    def __call__(self) -> int:
        return int(self.consumer.get_watermark_offsets(self.partition, timeout=10, cached=False)[1])

    def close(self) -> None:
        self.consumer.close()


def _kafka_workers(pid: int) -> list[psutil.Process]:
    try:
        children = psutil.Process(pid).children()
        return [p for p in children if any("etlstage-kafka" in a for a in p.cmdline())]
    except psutil.NoSuchProcess:
        return []


def _wait_or_say_why(proc: subprocess.Popen[bytes], folder: Path, env: dict[str, str], kills: list[str]) -> None:
    """The run killed last ends; one that does not is stopped (gracefully: nothing of it is
    left running) and the test fails with what ``etlstage status`` said of it."""
    try:
        proc.wait(240)
    except subprocess.TimeoutExpired:
        status = subprocess.run(
            [*ETLSTAGE, "status", "stages.yaml"], cwd=folder, env=env, capture_output=True, text=True
        )
        proc.terminate()  # its workers are stopped and reaped
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        pytest.fail(f"the run did not end 240 s after the kills {kills}; etlstage status said:\n{status.stdout}")


@pytest.mark.slow  # a JVM broker and a minute of runs
@pytest.mark.timeout(900)
def test_every_record_once_across_kills_of_the_supervisor_and_the_workers(broker, topic, pdir):
    src, dst = topic(3), topic(1)
    records = [b"r%05d" % i for i in range(N)]
    produce(broker.bootstrap, src, [(b"k%d" % (i % 32), r) for i, r in enumerate(records)])
    pdir.write(f"""
        stages:
          - name: read
            type: E
            mode: cyclic
            command: [etlstage-kafka, --topic, {src}, --group, g-{src}, --max-records-per-cycle, "100",
                      --max-cycle-seconds, "0.3", --config, session.timeout.ms=6000,
                      --config, heartbeat.interval.ms=1000]
          - {{name: pass, type: T, mode: batch, batch_size: 50, command: ["{{PY}}", "{{TW}}", slow, "0.2", t-busy]}}
          - name: write
            type: L
            mode: batch
            batch_size: 60
            command: [etlstage-kafka-load, --topic, {dst}, --transactional, --transactional-id, tx-{dst}]
    """)
    env = {**os.environ, "ETLSTAGE_KAFKA_BOOTSTRAP": broker.bootstrap}
    rng = random.Random(36)
    busy = pdir.path / "t-busy"
    kills: list[str] = []
    plan = ["supervisor", "etlstage-kafka", "etlstage-kafka-load"] * (KILLS // 3)
    rng.shuffle(plan)
    proc: subprocess.Popen[bytes] | None = None
    end = EndOffset(broker.bootstrap, dst)
    with open(pdir.path / "log.txt", "ab") as log:
        while len(kills) < KILLS:
            if proc is None:
                proc = subprocess.Popen(RUN_ONCE, cwd=pdir.path, stdout=log, stderr=log, env=env)
            before = end()
            run = proc
            # kill (at a seeded moment) once records flow (the output grew since the last kill) and a
            # window is inside the T
            wait_for(
                lambda run=run, before=before: run.poll() is not None or (end() > before and busy.exists()),
                within=120,
                what="records flowing",
                every=0.05,
            )
            if run.poll() is not None:
                break  # the run ended: nothing left to cut
            time.sleep(rng.uniform(0.0, 0.15))  # somewhere in the T's 0.2 s, not as synchronisation
            aim = plan[len(kills)]
            victim = next((w for w in _kafka_workers(run.pid) if os.path.basename(w.cmdline()[1]) == aim), None)
            if aim == "supervisor" or victim is None:
                run.send_signal(signal.SIGKILL)
                run.wait(30)
                busy.unlink(missing_ok=True)  # the T dies with the supervisor
                kills.append("supervisor")
                proc = None
            else:
                kills.append(aim)
                victim.kill()  # the supervisor starts it again; the run goes on
        if proc is not None:
            _wait_or_say_why(proc, pdir.path, env, kills)
        final = subprocess.run(RUN_ONCE, cwd=pdir.path, stdout=log, stderr=log, env=env, timeout=300)
    end.close()
    assert len(kills) >= 3, f"the pipeline finished before it was killed three times: {kills}"
    assert {"supervisor", "etlstage-kafka", "etlstage-kafka-load"} <= set(kills), kills
    assert final.returncode == 0, (pdir.path / "log.txt").read_text()[-3000:]
    got = consume_all(broker.bootstrap, dst, idle=1.0)
    assert len(got) == len(set(got)) == N, (len(got), len(set(got)))
    assert set(got) == set(records)


@pytest.mark.slow  # a JVM broker and Spark runs
@pytest.mark.timeout(900)
@pytest.mark.parametrize("native", [False, True], ids=["workers", "native"])
def test_every_record_once_across_kills_of_the_spark_driver(broker, topic, pdir, native):
    """The same pipeline under `--engine spark`, the Kafka stages as their worker processes
    or native (Spark's own Kafka source; the loader's code in the driver): the driver and
    its JVM killed (SIGKILL to the process group) once at each point of a run."""
    src, dst = topic(3), topic(1)
    # librdkafka settings are the worker's: Spark's source refuses them
    client = ", --config, session.timeout.ms=6000, --config, heartbeat.interval.ms=1000" if not native else ""
    records = [b"s%05d" % i for i in range(600)]
    produce(broker.bootstrap, src, [(b"k%d" % (i % 32), r) for i, r in enumerate(records)])
    pdir.write(f"""
        stages:
          - name: read
            type: E
            mode: cyclic
            native: {str(native).lower()}
            command: [etlstage-kafka, --topic, {src}, --group, g-{src}, --max-records-per-cycle, "60",
                      --max-cycle-seconds, "0.3"{client}]
          - {{name: pass, type: T, mode: batch, batch_size: 30, command: ["{{PY}}", "{{TW}}", slow, "0.3", t-busy]}}
          - name: write
            type: L
            mode: batch
            batch_size: 40
            native: {str(native).lower()}
            command: [etlstage-kafka-load, --topic, {dst}, --transactional, --transactional-id, tx-{dst}]
        engine: {{kind: spark, master: "local[2]"}}
    """)
    env = {**os.environ, "ETLSTAGE_KAFKA_BOOTSTRAP": broker.bootstrap}
    seed = int(os.environ.get("ETLSTAGE_CRASH_SEED", "37"))
    busy = pdir.path / "t-busy"
    runs: list[int] = []
    end = EndOffset(broker.bootstrap, dst)

    def start() -> subprocess.Popen[bytes]:
        runs.append(end())  # the output's end when the run starts
        busy.unlink(missing_ok=True)  # the T of a killed run died with it
        return subprocess.Popen(RUN_ONCE, cwd=pdir.path, stdout=log, stderr=log, env=env, start_new_session=True)

    def committed_and_busy() -> bool:
        """This run has committed a transaction (the output grew) and a window is inside the
        T: the mid-batch kill lands while records flow, with this run's output in Kafka."""
        return busy.exists() and end() > runs[-1]

    with open(pdir.path / "log.txt", "ab") as log:
        # once at each point of a run (tests/support/crash_points.py): in its start-up, inside a
        # micro-batch, between two
        hit = kill_at_each_point(start, pdir.path / ".etlstage", seed, inside=committed_and_busy)
        final = subprocess.run(RUN_ONCE, cwd=pdir.path, stdout=log, stderr=log, env=env, timeout=600)
    end.close()
    assert set(hit) == set(POINTS), f"seed {seed}: the kills hit {hit}, not every point of a run"
    assert final.returncode == 0, (pdir.path / "log.txt").read_text()[-3000:]
    # one live loader per partition (spark/tasks/plan.py, one_live_worker): no two producers of one
    # transactional id fencing each other's transactions between Spark's Python processes
    assert "fenced by a newer instance" not in (pdir.path / "log.txt").read_text()
    got = consume_all(broker.bootstrap, dst, idle=1.0)
    assert len(got) == len(set(got)) == len(records), (len(got), len(set(got)))
    assert set(got) == set(records)
