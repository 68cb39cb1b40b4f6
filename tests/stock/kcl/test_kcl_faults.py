"""A misbehaving MLD child ends the adapter non-zero with a clear message, never a hang;
an invalid checkpoint gets the KCL's exception name and the run goes on."""

from __future__ import annotations

import os
import re
import time

import pytest

from tests.support.kcl import CHILDREN, EOP, batches_to_bytes, envelope, run_adapter

pytestmark = pytest.mark.timeout(60)
CHILD = ["node", str(CHILDREN / "mld_child.js"), "v2"]
THREE_BATCHES = batches_to_bytes([[b"a", b"b"], [b"c", b"d"], [b"e"]])


def _child_pids(stderr: str) -> list[int]:
    return [int(p) for p in re.findall(r"started MLD child pid (\d+)", stderr)]


def _assert_gone(pid: int) -> None:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return
    # a zombie would be reaped by init; a live child is a leak
    with open(f"/proc/{pid}/stat") as f:
        assert f.read().split()[2] == "Z", f"MLD child {pid} still running"


def test_child_exits_in_mid_batch(tmp_path):
    run = run_adapter(tmp_path, CHILD, THREE_BATCHES, env={"KCL_FAULT": "exit-mid-batch"})
    assert run.returncode == 1
    assert "exited with status 3 while the adapter waited for the status of processRecords" in run.stderr
    assert run.stdout == b"a\nb\n" + EOP  # the first batch only: the second is not acknowledged


def test_child_never_answers(tmp_path):
    started = time.monotonic()
    run = run_adapter(tmp_path, CHILD, THREE_BATCHES, adapter_args=["--timeout", "1.5"], env={"KCL_FAULT": "hang"})
    assert time.monotonic() - started < 20
    assert run.returncode == 1
    assert "did not answer the status of processRecords in time" in run.stderr
    assert run.stdout == b"a\nb\n" + EOP
    assert len(_child_pids(run.stderr)) == 1
    for pid in _child_pids(run.stderr):
        _assert_gone(pid)


def test_child_answers_the_wrong_action(tmp_path):
    run = run_adapter(tmp_path, CHILD, THREE_BATCHES, env={"KCL_FAULT": "wrong-action"})
    assert run.returncode == 1
    assert (
        "answered with status for 'initialize' while the adapter waited for the status of 'processRecords'"
        in run.stderr
    )
    assert run.stdout == b"a\nb\n" + EOP


def test_invalid_checkpoint_is_refused_and_the_run_goes_on(tmp_path):
    run = run_adapter(tmp_path, CHILD, THREE_BATCHES, env={"KCL_FAULT": "bad-checkpoint"})
    assert run.returncode == 0, run.stderr
    errors = run.events("checkpoint-error")
    assert len(errors) == 3 and {e[-1] for e in errors} == {"IllegalArgumentException"}
    assert run.stdout.count(EOP) == 3


def test_child_that_cannot_start(tmp_path):
    run = run_adapter(tmp_path, ["/nonexistent/processor"], THREE_BATCHES)
    assert run.returncode == 1
    assert "cannot start the MLD child ['/nonexistent/processor']" in run.stderr


def test_bad_envelope_names_the_message(tmp_path):
    bad = envelope("shardId-000000000001", 1, "x").replace(b'"sequenceNumber": "0', b'"sequenceNumber": "x0')
    run = run_adapter(tmp_path, CHILD, batches_to_bytes([[b"ok", bad]]))
    assert run.returncode == 1
    assert "batch 1, message 2: envelope sequenceNumber 'x0" in run.stderr
    assert run.stdout == b""


def test_missing_command_and_state_dir(tmp_path):
    run = run_adapter(tmp_path, [], THREE_BATCHES)
    assert run.returncode == 2 and "no record processor command" in run.stderr


def test_checkpoint_without_a_checkpointer(tmp_path):
    run = run_adapter(
        tmp_path,
        CHILD,
        THREE_BATCHES,
        env={"KCL_FAULT": "checkpoint-at-init"},
        adapter_args=["--no-shutdown-requested"],
    )
    assert run.returncode == 0, run.stderr
    assert run.events("checkpoint-error") == [
        ["checkpoint-error", "shardId-000000000000", "null", "null", "InvalidStateException"]
    ]
    assert not run.events("shutdown_requested") and run.events("lease_lost")


def test_sigterm_kills_the_children(tmp_path):
    """The supervisor's SIGTERM: the adapter kills its children (their own sessions) and exits."""
    import subprocess
    import sys

    from tests.support.paths import ROOT

    env = dict(
        os.environ,
        PYTHONPATH=str(ROOT),
        ETLSTAGE_TYPE="T",
        ETLSTAGE_MODE="batch",
        ETLSTAGE_BATCH_SIZE="2",
        ETLSTAGE_STATE_DIR=str(tmp_path),
        KCL_FAULT="hang",
        KCL_TEST_OUT=str(tmp_path / "out.txt"),
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "etlstage_workers.kcl", "--", *CHILD],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        cwd=ROOT,
    )
    proc.stdin.write(b"a\nb\n\x17")
    proc.stdin.flush()
    assert proc.stdout.read(5) == b"a\nb\n" + EOP
    proc.stdin.write(b"c\nd\n\x17")  # the child hangs on this one
    proc.stdin.flush()
    out = tmp_path / "out.txt"
    deadline = time.monotonic() + 20
    while "EVENT hanging" not in (out.read_text() if out.exists() else "") and time.monotonic() < deadline:
        time.sleep(0.02)  # until the second batch has reached the child
    assert "EVENT hanging" in out.read_text()
    proc.terminate()
    proc.wait(timeout=10)
    stderr = proc.stderr.read().decode()
    assert proc.returncode == 128 + 15, stderr
    pids = _child_pids(stderr)
    assert len(pids) == 1
    for pid in pids:
        _assert_gone(pid)


def test_failure_among_parallel_shards(tmp_path):
    """Three shards in each batch, their children working at once; all of them exit on the
    second batch: the first shard in input order is reported, and every child is gone."""
    batches = [
        [envelope(f"shardId-{s}", n, f"{s}-{n}") for n in range(b * 3, b * 3 + 3) for s in "xyz"] for b in range(3)
    ]
    run = run_adapter(tmp_path, CHILD, batches_to_bytes(batches), env={"KCL_FAULT": "exit-mid-batch"})
    assert run.returncode == 1
    assert "for shardId-x exited with status 3 while the adapter waited for the status of processRecords" in run.stderr
    assert run.stdout == b"".join(m + b"\n" for m in batches[0]) + EOP
    assert len(_child_pids(run.stderr)) == 3
    for pid in _child_pids(run.stderr):
        _assert_gone(pid)


def test_child_dies_before_initialize_answers(tmp_path):
    """The common first mistake: amazon_kclpy is not importable by the processor."""
    import sys

    run = run_adapter(tmp_path, [sys.executable, str(CHILDREN / "kclpy_v3_processor.py")], THREE_BATCHES)
    assert run.returncode == 1
    assert "exited with status 1 while the adapter waited for the status of initialize" in run.stderr
    assert "No module named 'amazon_kclpy'" in run.stderr  # the child's stderr reaches the log
    assert len(_child_pids(run.stderr)) == 1
    for pid in _child_pids(run.stderr):
        _assert_gone(pid)
