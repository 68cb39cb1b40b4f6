"""The deliberately broken workers in tests/fixtures/ really are broken, and only as
their docstrings say: they are the ground truth for the conformance checker's tests."""

from __future__ import annotations

import sys

import pytest

from etlstage.protocol import Scenario
from tests.support.paths import FIXTURES
from tests.support.wire import DEFAULT, WireWorker, converse

HERE = FIXTURES
pytestmark = pytest.mark.timeout(60)


def test_broken_bnc_writes_bnc_after_the_filling_message() -> None:
    scenario = Scenario(type="T", mode="batch", batch_size=2, batch_driver="worker")
    worker = WireWorker([sys.executable, str(HERE / "broken_bnc.py")], scenario)
    try:
        assert worker.step(b"a\n", b"\x11") == b"\x11"  # right so far
        assert worker.step(b"b\n", b"\x11A\nB\n\x00") == b"\x11A\nB\n\x00"  # the stray BNC
        assert worker.step(b"c\n", b"\x11") == b"\x11"
        assert worker.step(b"\x17", b"C\n\x00") == b"C\n\x00"  # partial batches are fine
        done = worker.finish()
    finally:
        worker.kill()
    assert (done.rest, done.code) == (b"", 0)


def test_broken_bnc_fails_the_correct_conversation() -> None:
    scenario = Scenario(type="T", mode="batch", batch_size=2, batch_driver="worker")
    worker = WireWorker([sys.executable, str(HERE / "broken_bnc.py")], scenario)
    with pytest.raises(AssertionError, match="step 1"):
        converse(worker, [("a{M}", "{N}"), ("b{M}", "A{M}B{M}{P}")], DEFAULT)


def test_stray_print_puts_a_line_on_stdout_before_any_request() -> None:
    worker = WireWorker(["sh", str(HERE / "stray_print.sh")], Scenario(type="T", mode="single"))
    try:
        stray = b"starting up, hello from stray_print.sh\n"
        assert worker.step(b"", b"") == b""
        assert worker.read(len(stray)) == stray  # unasked-for bytes: a violation
        assert worker.step(b"a\n", b"a\n\x00") == b"a\n\x00"  # otherwise a correct worker
        done = worker.finish()
    finally:
        worker.kill()
    assert (done.rest, done.code) == (b"", 0)
