"""The harness and check-worker drive worker-driven batches as both engines do: written
ahead of the worker's BNCs (tests/fixtures/ahead.py answers only if they are)."""

from __future__ import annotations

import sys

from etlstage.testing.harness import StageHarness
from tests.support.paths import FIXTURES, ROOT
from tests.support.run_cli import etlstage

AHEAD = [sys.executable, str(FIXTURES / "ahead.py"), "greedy", "check"]
WORKER_DRIVEN = ("--type", "T", "--mode", "batch", "--batch-driver", "worker")


def test_the_harness_writes_a_worker_driven_batch_ahead_of_its_bncs():
    inputs = [b"m%d" % i for i in range(10)]
    r = StageHarness().run(
        AHEAD, type="T", mode="batch", batch_driver="worker", batch_size=4, inputs=inputs, timeout=10
    )
    assert r.inputs == [inputs[:4], inputs[4:8], inputs[8:]]
    assert r.batches == r.inputs


def test_check_worker_passes_a_worker_that_reads_messages_written_ahead():
    r = etlstage(ROOT, "check-worker", *WORKER_DRIVEN, "--timeout", "5", "--", *AHEAD, timeout=300)
    assert r.code == 0, r.stdout
    assert "PASS  batch, worker-driven (size 3): BNC exactly when due, partial batch closed by EOB" in r.stdout


def test_check_worker_fails_a_worker_that_takes_one_read_for_one_message():
    lockstep = [sys.executable, str(FIXTURES / "lockstep.py")]
    # it waits for a message it holds already: each check ends at its start-up timeout
    r = etlstage(ROOT, "check-worker", *WORKER_DRIVEN, "--timeout", "1", "--", *lockstep, timeout=300)
    assert r.code == 1, r.stdout
    assert "FAIL  batch, worker-driven (size 3): BNC exactly when due, partial batch closed by EOB" in r.stdout
