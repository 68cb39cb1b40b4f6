"""The start-up quiet before a fresh worker's first request (runtime.session): it ends as
soon as the worker waits for that request with nothing written, and runs its full length
while the worker may still write (a banner unread, a thread of its own still busy)."""

from __future__ import annotations

import asyncio
import os
import sys
import time
from pathlib import Path

import pytest

from etlstage.config.model import Timeouts
from etlstage.conversation import policy
from etlstage.kit.transport import ProcessTransport
from etlstage.protocol.scenario import Scenario
from etlstage.runtime.session import WorkerSession

pytestmark = pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="Linux /proc only")

QUIET = 20.0  # long enough that ending early can only be the worker's wait being seen


async def quiet_of(argv: list[str], tmp_path: Path, limit: float) -> float | None:
    """Seconds the start-up quiet of a fresh ``argv`` lasted; None when still running after ``limit`` s."""
    t = await ProcessTransport.spawn(argv, dict(os.environ), str(tmp_path), "w")
    s = WorkerSession(t, Scenario(type="T", mode="batch", batch_size=10), "w", argv, Timeouts(), 1 << 20)
    try:
        began = time.monotonic()
        await asyncio.wait_for(s.startup_quiet(), limit)
        return time.monotonic() - began
    except TimeoutError:
        return None
    finally:
        await s.abort()


@pytest.fixture(autouse=True)
def long_quiet(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(policy, "STARTUP_QUIET", QUIET)


def test_a_worker_waiting_for_its_first_request_is_asked_at_once(tmp_path: Path) -> None:
    took = asyncio.run(quiet_of(["cat"], tmp_path, QUIET / 2))
    assert took is not None, "the quiet ran on while cat waited for its stdin"


def test_a_banner_unread_keeps_the_quiet_running(tmp_path: Path) -> None:
    # it waits on its stdin too, but has written: the reader must see that first
    assert asyncio.run(quiet_of(["sh", "-c", "echo v1 ready; exec cat"], tmp_path, 1.5)) is None


def test_a_thread_still_busy_keeps_the_quiet_running(tmp_path: Path) -> None:
    code = "import sys, threading, time\nthreading.Thread(target=time.sleep, args=(30,)).start()\nsys.stdin.read()"
    assert asyncio.run(quiet_of([sys.executable, "-c", code], tmp_path, 1.5)) is None


def test_the_quiet_still_ends_on_time(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(policy, "STARTUP_QUIET", 0.3)
    took = asyncio.run(quiet_of(["sleep", "30"], tmp_path, 10))
    assert took is not None and took >= 0.25
