"""The whole pipeline as one Spark streaming query on local[2]: exact sink contents, real workers.

The test run's one SparkSession (the ``spark`` fixture); each test runs its pipeline in it with its own
checkpoint and state under tmp_path (the CLI runs it the same way, in its own JVM).
"""

from __future__ import annotations

import json
import re
import sys
import zlib
from pathlib import Path

import pytest

from etlstage.config.loader import parse_config
from etlstage.spark.driver.config import apply_flags
from etlstage.state.store import StateStore
from tests.conftest import PY, TW
from tests.support.paths import FIXTURES

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]
PIDLOG = str(FIXTURES / "pidlog.py")


def run(spark, tmp: Path, stages: str, once: bool = True) -> int:
    from etlstage.spark.driver.run import run_in
    from etlstage.spark.tasks.plan import Plan

    text = stages.replace("{PY}", PY).replace("{TW}", TW).replace("{PIDLOG}", PIDLOG)
    (tmp / "stages.yaml").write_text(text)
    config = apply_flags(parse_config(text, str(tmp / "stages.yaml"), base_dir=str(tmp)), "spark", None)
    return run_in(spark, Plan(config, once=once), progress=False)


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def fanout(i: int) -> list[str]:
    k = i % 3
    return [] if k == 0 else [f"{i}a", f"{i}b"] if k == 1 else [str(i)]


def test_plain_extract_fanout_transform_and_load(spark, tmp_path: Path) -> None:
    code = run(
        spark,
        tmp_path,
        """
stages:
  - {name: ext, type: E, command: [{PY}, {TW}, count, "200"]}
  - {name: fan, type: T, command: [{PY}, {TW}, fanout]}
  - {name: load, type: L, command: [{PY}, {TW}, append, out.txt]}
""",
    )
    assert code == 0
    assert sorted(lines(tmp_path / "out.txt")) == sorted(x for i in range(200) for x in fanout(i))


@pytest.mark.parametrize("active", ["another session", "no session"])
def test_a_thread_whose_active_session_is_not_the_runs_still_finds_the_engines_source_and_sink(
    spark, tmp_path: Path, active: str
) -> None:
    """Spark looks a Python data source up through the calling thread's active session: a
    caller whose thread holds another session (a notebook's second one), or none (a JVM
    thread py4j made anew), got DATA_SOURCE_NOT_FOUND for etlstage-load and loaded
    nothing.  The run makes its session active and puts the thread's own back after."""
    jsession = getattr(spark._jvm, "org.apache.spark.sql.classic.SparkSession")
    other = spark.newSession()
    if active == "another session":
        jsession.setActiveSession(other._jsparkSession)
    else:
        jsession.clearActiveSession()
    try:
        code = run(
            spark,
            tmp_path,
            """
stages:
  - {name: ext, type: E, command: [{PY}, {TW}, count, "30"]}
  - {name: load, type: L, command: [{PY}, {TW}, append, out.txt]}
""",
        )
        after = jsession.getActiveSession()
        assert after.isDefined() == (active == "another session")
        if after.isDefined():
            assert after.get().equals(other._jsparkSession)  # the caller's own, back
    finally:
        jsession.setActiveSession(spark._jsparkSession)
    assert code == 0
    assert sorted(lines(tmp_path / "out.txt"), key=int) == [str(i) for i in range(30)]


def test_cyclic_worker_offsets_two_transforms_batch_modes_and_worker_starts(spark, tmp_path: Path) -> None:
    """≥ 10 micro-batches (one per cycle); each worker process lives across them.

    ``up`` (2 partitions) runs as its own mapInArrow step; ``wd`` and the loader keep one
    partition and run inside the sink's tasks."""
    code = run(
        spark,
        tmp_path,
        """
stages:
  - {name: ext, type: E, mode: cyclic, command: [{PY}, {TW}, count, "95", "8"]}
  - {name: up, type: T, mode: batch, batch_size: 3, instances: 2,
     command: [{PY}, {PIDLOG}, up.pids, {PY}, {TW}, upper]}
  - {name: wd, type: T, mode: batch, batch_size: 4, batch_driver: worker,
     command: [{PY}, {PIDLOG}, wd.pids, {PY}, {TW}, fanout]}
  - {name: load, type: L, mode: batch, batch_size: 5,
     command: [{PY}, {PIDLOG}, load.pids, {PY}, {TW}, batches, batches.jsonl]}
""",
    )
    assert code == 0
    batches = [json.loads(x) for x in lines(tmp_path / "batches.jsonl")]
    assert sorted(m for b in batches for m in b) == sorted(x for i in range(95) for x in fanout(i))
    assert all(1 <= len(b) <= 5 for b in batches)
    offsets = (tmp_path / ".etlstage" / "stages" / "stages" / "ext" / "offset-0").read_text()
    assert offsets == "95"  # every cycle was committed: its next request came after Spark's commit
    commits = list((tmp_path / ".etlstage" / "stages" / "spark-checkpoint" / "commits").glob("[0-9]*"))
    assert len(commits) == 12  # 95 messages, 8 per cycle
    for name, partitions in (("up", 2), ("wd", 1), ("load", 1)):
        starts = [line.split() for line in lines(tmp_path / f"{name}.pids")]
        parents = [(parent, partition) for _, parent, partition in starts]
        # at most one start per (stage, partition, Spark Python worker), far fewer than tasks
        assert len(parents) == len(set(parents)), (name, starts)
        assert 1 <= len(starts) <= len(commits) * partitions // 2, (name, starts)
        assert sorted({partition for _, _, partition in starts}) == [str(p) for p in range(partitions)], starts


def test_partition_by_keeps_each_key_on_one_partition(spark, tmp_path: Path) -> None:
    keys = [f"k{i % 7}" for i in range(60)]
    data = tmp_path / "in.jsonl"
    data.write_text("".join(json.dumps({"id": i, "key": k}) + "\n" for i, k in enumerate(keys)))
    code = run(
        spark,
        tmp_path,
        f"""
stages:
  - {{name: ext, type: E, command: [cat, {data}]}}
  - {{name: tag, type: T, instances: 3, partition_by: /key,
     command: [sh, -c, 'echo "start $ETLSTAGE_INSTANCE $(date +%s.%N)" >> {tmp_path}/life.txt;
               {{PY}} {{TW}} pass; echo "end $ETLSTAGE_INSTANCE $(date +%s.%N)" >> {tmp_path}/life.txt']}}
  - {{name: load, type: L, instances: 3, partition_by: /key,
     command: [sh, -c, 'exec {{PY}} {{TW}} append "$ETLSTAGE_STATE_DIR/got.txt"']}}
""",
    )
    assert code == 0
    got = {}
    for p in range(3):
        for line in lines(tmp_path / ".etlstage" / "stages" / "stages" / "load" / f"partition-{p}" / "got.txt"):
            got[json.loads(line)["id"]] = p
    assert sorted(got) == list(range(60))
    for i, k in enumerate(keys):  # the supervisor's hash: CRC-32 of the key's JSON, modulo instances
        assert got[i] == zlib.crc32(json.dumps(k).encode()) % 3
    # keyed state is never split: one live worker per partition at any time (moves are restarts)
    life: dict[str, list[tuple[str, float]]] = {}
    for line in lines(tmp_path / "life.txt"):
        what, partition, at = line.split()
        life.setdefault(partition, []).append((what, float(at)))
    assert sorted(life) == ["0", "1", "2"]
    for partition, events in life.items():
        events.sort(key=lambda e: e[1])
        assert [w for w, _ in events][::2] == ["start"] * ((len(events) + 1) // 2), (partition, events)


def test_a_keyed_stage_starts_one_worker_per_partition_over_many_micro_batches(spark, tmp_path: Path, capsys) -> None:
    """``partition_by``: Spark runs a partition's tasks in whichever Python process is free,
    and the partition's worker follows them running (handed over, not restarted): one start
    per partition over 12 micro-batches, and its reported counters are all in the summary."""
    code = run(
        spark,
        tmp_path,
        """
stages:
  - {name: ext, type: E, mode: cyclic, command: [{PY}, {TW}, count, "95", "8"]}
  - {name: keyed, type: T, mode: batch, batch_size: 3, instances: 2, partition_by: "",
     command: [{PY}, {PIDLOG}, keyed.pids, {PY}, {TW}, counting]}
  - {name: load, type: L, mode: batch, batch_size: 5, command: [{PY}, {TW}, append, out.txt]}
""",
    )
    err = capsys.readouterr().err
    assert code == 0, err
    assert sorted(lines(tmp_path / "out.txt"), key=int) == [str(i) for i in range(95)]
    assert len(list((tmp_path / ".etlstage" / "stages" / "spark-checkpoint" / "commits").glob("[0-9]*"))) == 12
    starts = [line.split() for line in lines(tmp_path / "keyed.pids")]
    assert sorted(partition for _, _, partition in starts) == ["0", "1"], starts
    assert re.search(r"^keyed: seen 95\b", err, re.M), err  # every report of the run's workers counted


def test_a_loader_has_one_live_worker_per_partition_over_many_micro_batches(spark, tmp_path: Path, capsys) -> None:
    """A loader often holds what must be one per instance (a Kafka transactional id, a file
    lock): as under the supervisor, one live loader worker per partition, which follows the
    tasks between Spark's Python processes running (handed over, not a second one started).
    Two at once fenced each other's Kafka transactions at every move."""
    code = run(
        spark,
        tmp_path,
        """
stages:
  - {name: ext, type: E, mode: cyclic, command: [{PY}, {TW}, count, "95", "8"]}
  - {name: load, type: L, mode: batch, batch_size: 5, command: [{PY}, {PIDLOG}, load.pids, {PY}, {TW}, append, out.txt]}
""",
    )
    err = capsys.readouterr().err
    assert code == 0, err
    assert sorted(lines(tmp_path / "out.txt"), key=int) == [str(i) for i in range(95)]
    assert len(list((tmp_path / ".etlstage" / "stages" / "spark-checkpoint" / "commits").glob("[0-9]*"))) == 12
    starts = [line.split() for line in lines(tmp_path / "load.pids")]
    assert [partition for _, _, partition in starts] == ["0"], starts


def test_custom_markers_between_stages(spark, tmp_path: Path) -> None:
    code = run(
        spark,
        tmp_path,
        """
stages:
  - {name: ext, type: E, command: [{PY}, {TW}, count, "30"]}
  - {name: up, type: T, markers: {eom: "|", eop: "#", eob: "~", bnc: "^"}, mode: batch, batch_size: 4,
     command: [{PY}, {TW}, fanout]}
  - {name: load, type: L, command: [{PY}, {TW}, append, out.txt]}
""",
    )
    assert code == 0
    assert sorted(lines(tmp_path / "out.txt")) == sorted(x for i in range(30) for x in fanout(i))


def test_dead_letters_go_to_the_state_store(spark, tmp_path: Path) -> None:
    code = run(
        spark,
        tmp_path,
        """
stages:
  - {name: ext, type: E, command: [{PY}, {TW}, count, "20"]}
  - {name: bad, type: T, mode: batch, batch_size: 5, on_failure: deadletter,
     restart: {max_restarts: 1, backoff: 0.05}, command: [{PY}, {TW}, poison, "7"]}
  - {name: load, type: L, command: [{PY}, {TW}, idem, out.txt]}
""",
    )
    assert code == 0
    assert sorted(lines(tmp_path / "out.txt"), key=int) == [str(i) for i in range(20) if i != 7]
    store = StateStore(tmp_path / ".etlstage" / "stages")
    dead = store.deadletters()
    assert [(d.stage, d.split()) for d in dead] == [("bad", [b"7"])]
    assert "poison message b'7'" in dead[0].error


def test_on_failure_fail_stops_the_query_with_nothing_committed(spark, tmp_path: Path, capsys) -> None:
    code = run(
        spark,
        tmp_path,
        """
stages:
  - {name: ext, type: E, command: [{PY}, {TW}, count, "10"]}
  - {name: bad, type: T, restart: {max_restarts: 1, backoff: 0.05}, command: [{PY}, {TW}, poison, "3"]}
  - {name: load, type: L, command: [{PY}, {TW}, append, out.txt]}
""",
    )
    assert code == 1
    assert not list((tmp_path / ".etlstage" / "stages" / "spark-checkpoint" / "commits").glob("[0-9]*"))
    assert not lines(tmp_path / "out.txt")


def test_supervisor_managed_offsets_on_executors(spark, tmp_path: Path) -> None:
    code = run(
        spark,
        tmp_path,
        """
stages:
  - {name: ext, type: E, mode: cyclic, offsets: supervisor, offset_policy: {type: counter, start: 0, step: 7},
     command: [{PY}, {TW}, count, "40"]}
  - {name: load, type: L, command: [{PY}, {TW}, append, out.txt]}
""",
    )
    assert code == 0
    assert sorted(lines(tmp_path / "out.txt"), key=int) == [str(i) for i in range(40)]


def test_supervisor_managed_offsets_with_instances_split_each_window(spark, tmp_path: Path) -> None:
    code = run(
        spark,
        tmp_path,
        """
stages:
  - {name: ext, type: E, mode: cyclic, offsets: supervisor, offset_policy: {type: counter, start: 0, step: 10},
     instances: 3, command: [{PY}, {SHARDED}, "45"]}
  - {name: load, type: L, command: [{PY}, {TW}, append, out.txt]}
engine: {kind: spark}
""".replace("{SHARDED}", str(FIXTURES / "sharded_count.py")),
    )
    assert code == 0
    assert sorted(lines(tmp_path / "out.txt"), key=int) == [str(i) for i in range(45)]


def test_a_protocol_violation_names_stage_host_pid_and_bytes(spark, tmp_path: Path, caplog) -> None:
    code = run(
        spark,
        tmp_path,
        """
stages:
  - {name: ext, type: E, command: [{PY}, {TW}, count, "3"]}
  - {name: junk, type: T, restart: {max_restarts: 0}, command: [{PY}, {TW}, garbage]}
  - {name: load, type: L, command: [{PY}, {TW}, append, out.txt]}
""",
    )
    assert code == 1
    text = caplog.text
    assert "protocol violation by junk" in text and "EOB" in text
    assert "on executor host" in text and "pid: " in text and "garbage" in text


def test_several_extractors_feed_one_transform(spark, tmp_path: Path) -> None:
    code = run(
        spark,
        tmp_path,
        """
stages:
  - {name: plain, type: E, command: [{PY}, {TW}, count, "10"]}
  - {name: cycles, type: E, mode: cyclic, command: [sh, -c, 'exec {PY} {TW} count 25 4']}
  - {name: up, type: T, mode: batch, batch_size: 2, command: [{PY}, {TW}, fanout]}
  - {name: load, type: L, command: [{PY}, {TW}, append, out.txt]}
""",
    )
    assert code == 0
    want = [x for i in range(10) for x in fanout(i)] + [x for i in range(25) for x in fanout(i)]
    assert sorted(lines(tmp_path / "out.txt")) == sorted(want)


def test_request_timeouts_restart_and_dead_letter(spark, tmp_path: Path) -> None:
    code = run(
        spark,
        tmp_path,
        """
stages:
  - {name: ext, type: E, command: [{PY}, {TW}, count, "3"]}
  - {name: slow, type: T, mode: batch, batch_size: 3, on_failure: deadletter, timeouts: {startup: 1, request: 1},
     restart: {max_restarts: 0, backoff: 0.05}, command: [{PY}, {TW}, hang]}
  - {name: load, type: L, command: [{PY}, {TW}, append, out.txt]}
""",
    )
    assert code == 0
    dead = StateStore(tmp_path / ".etlstage" / "stages").deadletters()
    assert sorted(m for d in dead for m in d.split()) == [b"0", b"1", b"2"]
    assert all("did not answer within its start-up timeout of 1s" in d.error for d in dead)
    assert not lines(tmp_path / "out.txt")


def test_a_missing_program_is_named_before_the_query_starts(spark, tmp_path: Path, caplog) -> None:
    code = run(
        spark,
        tmp_path,
        """
stages:
  - {name: ext, type: E, command: [{PY}, {TW}, count, "3"]}
  - {name: t, type: T, command: [no-such-worker-program, --x]}
  - {name: load, type: L, command: [./missing-loader.sh]}
""",
    )
    assert code == 2
    assert "stage 't': program 'no-such-worker-program' not found" in caplog.text
    assert "stage 'load': program './missing-loader.sh' not found" in caplog.text
    assert not (tmp_path / ".etlstage" / "stages" / "spark-checkpoint" / "commits").exists()


def test_cli_summary_status_and_dead_letters(tmp_path: Path) -> None:
    """The real CLI in its own JVM: the summary's counts add up; status and deadletter read the run."""
    from tests.support.run_cli import etlstage

    (tmp_path / "stages.yaml").write_text(
        f"""
stages:
  - {{name: ext, type: E, mode: cyclic, command: [{PY}, {TW}, count, "30", "10"]}}
  - {{name: fan, type: T, on_failure: deadletter, restart: {{max_restarts: 0, backoff: 0.05}},
     command: [{PY}, {TW}, poison, "13"]}}
  - {{name: load, type: L, command: [{PY}, {TW}, append, out.txt]}}
engine: {{kind: spark, master: "local[2]"}}
"""
    )
    r = etlstage(tmp_path, "run", "--once", "--no-progress", timeout=240)
    assert r.code == 0, r.stderr[-3000:]
    rows = {
        line.split()[0]: line.split()
        for line in r.stderr.splitlines()
        if line.split()[:1] in (["ext"], ["fan"], ["load"])
    }
    assert rows["ext"][1:4] == ["E", "0", "30"]
    assert rows["fan"][1:4] == ["T", "30", "29"]
    assert rows["load"][1:4] == ["L", "29", "0"]
    assert "1 message(s) in the dead-letter store" in r.stderr
    status = etlstage(tmp_path, "status")
    assert "engine: spark" in status.stdout and "micro-batches committed: 3" in status.stdout, status.stdout
    assert "in flight: none" in status.stdout and "dead letters: 1 (1 new)" in status.stdout
    listed = etlstage(tmp_path, "deadletter", "list")
    assert "stage 'fan' 1 message(s)" in listed.stdout, listed.stdout


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))


MISBEHAVE = str(FIXTURES / "misbehave.py")


def test_restarts_on_executors_reach_the_summary(spark, tmp_path: Path, capsys) -> None:
    """A T-stage on two partitions (its own mapInArrow step) and the loader (in the sink's
    tasks) each crash once: one restart each in the end-of-run summary."""
    from tests.support.live_run import restarts_in_summary

    for d in ("t-flags", "l-flags"):
        (tmp_path / d).mkdir()
    code = run(
        spark,
        tmp_path,
        f"""
stages:
  - {{name: ext, type: E, mode: cyclic, command: [{{PY}}, {{TW}}, count, "60", "20"]}}
  - {{name: up, type: T, instances: 2, mode: batch, batch_size: 5, restart: {{backoff: 0.05}},
     command: [{{PY}}, {MISBEHAVE}, {tmp_path}/t-flags, crash@2]}}
  - {{name: load, type: L, mode: batch, batch_size: 5, restart: {{backoff: 0.05}},
     command: [{{PY}}, {MISBEHAVE}, {tmp_path}/l-flags, crash@3]}}
""",
    )
    err = capsys.readouterr().err
    assert code == 0, err
    assert (tmp_path / "t-flags" / "crash@2").exists() and (tmp_path / "l-flags" / "crash@3").exists()
    assert restarts_in_summary(err) == {"ext": 0, "up": 1, "load": 1}, err
    assert "extracted 60 messages" in err


def test_a_message_a_stage_cannot_take_is_set_aside_as_a_dead_letter(spark, tmp_path: Path) -> None:
    """As under the supervisor: a marker of the receiving stage inside a message, or a message
    over its max_message_bytes, is refused and (on_failure: deadletter) set aside; the rest
    goes on.  ``up`` runs as its own step on two partitions, ``sink`` in the sink's tasks."""
    source = tmp_path / "source.txt"
    source.write_text("one\ntwo#three\n" + "x" * 40 + "\nfour\nfive|six\n")
    code = run(
        spark,
        tmp_path,
        f"""
stages:
  - {{name: ext, type: E, command: [cat, {source}]}}
  - {{name: up, type: T, instances: 2, markers: {{eop: "#"}}, on_failure: deadletter,
     command: [{{PY}}, {{TW}}, upper]}}
  - {{name: sink, type: L, markers: {{eom: "|"}}, max_message_bytes: 16, on_failure: deadletter,
     command: [{{PY}}, {{TW}}, append, out.txt]}}
""",
    )
    assert code == 0
    assert sorted(lines(tmp_path / "out.txt")) == ["FOUR", "ONE"]
    store = StateStore(tmp_path / ".etlstage" / "stages")
    dead = {d.stage: [] for d in store.deadletters()}
    for d in store.deadletters():
        dead[d.stage].append((d.split(), d.error))
    assert [m for m, _ in dead["up"]] == [[b"two#three"]]
    assert "stage 'up' contains its EOP marker 0x23" in dead["up"][0][1]
    assert sorted(m for m, _ in dead["sink"]) == [[b"FIVE|SIX"], [b"X" * 40]]
    errors = " ".join(e for _, e in dead["sink"])
    assert "stage 'sink' contains its EOM marker 0x7c" in errors
    assert "a message of 40 bytes for stage 'sink' is over its max_message_bytes of 16" in errors


def test_under_on_failure_fail_a_message_with_a_marker_stops_the_query_naming_it(spark, tmp_path: Path, caplog) -> None:
    source = tmp_path / "source.txt"
    source.write_text("one\ntwo#three\nfour\n")
    code = run(
        spark,
        tmp_path,
        f"""
stages:
  - {{name: ext, type: E, command: [cat, {source}]}}
  - {{name: sink, type: L, markers: {{eop: "#"}}, command: [{{PY}}, {{TW}}, append, out.txt]}}
""",
    )
    assert code == 1
    text = caplog.text
    assert "stage 'sink' contains its EOP marker 0x23" in text, text
    assert "(partition 0 on " in text and "bytes: b'two#three'" in text, text
    assert "on_failure=fail" in text and "Traceback" not in text and "SQLSTATE" not in text
    assert not list((tmp_path / ".etlstage" / "stages" / "spark-checkpoint" / "commits").glob("[0-9]*"))
    assert (
        not (tmp_path / ".etlstage" / "stages" / "state.db").exists()
        or not StateStore(tmp_path / ".etlstage" / "stages").deadletters()
    )


def test_a_shipped_file_gone_before_the_run_is_a_clear_error(spark, tmp_path: Path, caplog) -> None:
    """Checked when the file is read (``validate``); removed before Spark ships it: exit 2, named."""
    gone = tmp_path / "gone-helper.sh"
    gone.write_text("#!/bin/sh\n")
    text = f"""
stages:
  - {{name: ext, type: E, command: [{PY}, {TW}, count, "3"]}}
  - {{name: load, type: L, command: [{PY}, {TW}, append, out.txt]}}
engine: {{kind: spark, ship: [{gone.name}]}}
"""
    config = apply_flags(parse_config(text, str(tmp_path / "stages.yaml"), base_dir=str(tmp_path)), "spark", None)
    gone.unlink()
    from etlstage.spark.driver.run import run_in
    from etlstage.spark.tasks.plan import Plan

    assert run_in(spark, Plan(config, once=True), progress=False) == 2
    assert f"engine.ship: cannot ship {gone} to the executors" in caplog.text, caplog.text
    assert "Traceback" not in caplog.text and not (tmp_path / "out.txt").exists()


def test_batch_bytes_closes_a_loaders_batches_alike_on_both_engines(spark, tmp_path: Path) -> None:
    """batch_bytes is honoured by the Spark engine, and a worker-driven batch it closes
    before batch_size gets EOB in answer to its BNC, as under the supervisor."""
    from tests.support.run_cli import etlstage

    text = """
stages:
  - {name: ext, type: E, command: [{PY}, {TW}, count, "23"]}
  - {name: load, type: L, mode: batch, batch_size: 5, batch_bytes: 12, batch_driver: worker,
     command: [{PY}, {TW}, batches, out.jsonl]}
"""
    sup, spk = tmp_path / "sup", tmp_path / "spark"
    sup.mkdir()
    spk.mkdir()
    (sup / "stages.yaml").write_text(text.replace("{PY}", PY).replace("{TW}", TW))
    r = etlstage(sup, "run", "stages.yaml", "--once", "--no-progress")
    assert r.code == 0, r.stderr
    assert run(spark, spk, text) == 0
    batches = [json.loads(line) for line in lines(sup / "out.jsonl")]
    assert batches[:3] == [["0", "1", "2", "3", "4"], ["5", "6", "7", "8", "9"], ["10", "11", "12", "13"]]
    assert lines(spk / "out.jsonl") == lines(sup / "out.jsonl")


def test_worker_driven_batches_are_written_ahead_of_their_bncs_on_both_engines(spark, tmp_path: Path) -> None:
    """tests/fixtures/ahead.py writes no BNC before its whole batch is in its pipe (it
    answers only batches written ahead) and fails on a message of its next batch found
    there before it answered: a T and an L of it load every message once on both engines."""
    from tests.support.run_cli import etlstage

    ahead = str(FIXTURES / "ahead.py")
    text = f"""
stages:
  - {{name: ext, type: E, command: [{{PY}}, {{TW}}, count, "23"]}}
  - {{name: t, type: T, mode: batch, batch_size: 4, batch_driver: worker, command: [{{PY}}, {ahead}, greedy, check]}}
  - {{name: load, type: L, mode: batch, batch_size: 5, batch_driver: worker,
     command: [{{PY}}, {ahead}, greedy, check, load=out.jsonl]}}
"""
    sup, spk = tmp_path / "sup", tmp_path / "spark"
    sup.mkdir()
    spk.mkdir()
    (sup / "stages.yaml").write_text(text.replace("{PY}", PY).replace("{TW}", TW))
    r = etlstage(sup, "run", "stages.yaml", "--once", "--no-progress")
    assert r.code == 0, r.stderr
    assert run(spark, spk, text) == 0
    for engine in (sup, spk):
        batches = [json.loads(line) for line in lines(engine / "out.jsonl")]
        assert all(1 <= len(b) <= 5 for b in batches), batches
        assert sorted(int(m) for b in batches for m in b) == list(range(23))
