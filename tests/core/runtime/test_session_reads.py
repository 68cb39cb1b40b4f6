"""How a worker session reads (runtime.session): output taken as it arrives, time limits
looked at again when a request is written, and a chunk's arrival known only when the
session waited for it (the rules on confirmation use that time)."""

from __future__ import annotations

import asyncio
import os
import sys
import time
from pathlib import Path

from etlstage.config.model import Timeouts
from etlstage.errors import WorkerTimeout
from etlstage.kit.transport import ProcessTransport
from etlstage.protocol.scenario import Scenario
from etlstage.runtime.flow import Job, Piece, Window
from etlstage.runtime.session import WorkerSession

# a T-worker that answers each line it reads with "r\n" + EOP, after ``delay`` seconds
ANSWERS = (
    "import sys, time\n"
    "delay = float(sys.argv[1])\n"
    "for line in sys.stdin.buffer:\n"
    "    time.sleep(delay)\n"
    "    sys.stdout.buffer.write(b'r\\n\\x00'); sys.stdout.buffer.flush()\n"
)


async def session(tmp_path: Path, delay: float, timeouts: Timeouts) -> WorkerSession:
    argv = [sys.executable, "-c", ANSWERS, str(delay)]
    t = await ProcessTransport.spawn(argv, dict(os.environ), str(tmp_path), "t")
    return WorkerSession(t, Scenario(type="T", mode="single"), "t", argv, timeouts, 1 << 20)


async def ask(s: WorkerSession) -> None:
    job = Job(pieces=[Piece(b"m\n", 1, Window("src", 0, 3))], requests=1, batch=False)
    s.add_job(job)
    await s.write(b"m\n")


def test_an_answer_the_session_waited_for_is_timed_and_a_queued_one_is_not(tmp_path: Path) -> None:
    """Waited for: it arrived then (``tokens_arrived`` set). Already there when asked for:
    it may have come at any time (None), which makes the answer doubtful, never quick."""

    async def scenario() -> tuple[float | None, float, float | None]:
        s = await session(tmp_path, 0.3, Timeouts())
        try:
            await ask(s)
            asked = time.monotonic()
            first = await s.read_tokens()
            assert first and first[0] == b"r\n", first
            waited = s.tokens_arrived
            await ask(s)
            await asyncio.sleep(1.0)  # busy elsewhere: the answer arrives unseen
            await s.read_tokens()
            return waited, asked, s.tokens_arrived
        finally:
            await s.abort()

    waited, asked, queued = asyncio.run(scenario())
    assert waited is not None and waited >= asked + 0.25
    assert queued is None


def test_an_answer_already_received_is_taken_though_its_time_limit_passed_meanwhile(tmp_path: Path) -> None:
    """The worker answered in time; the session looked only later (its loop busy): the
    answer counts, not a timeout."""

    async def scenario() -> list[object]:
        s = await session(tmp_path, 0.0, Timeouts(startup=0.3, request=0.3))
        try:
            await ask(s)
            await asyncio.sleep(0.1)  # the answer arrives
            time.sleep(0.5)  # the loop blocked past the limit
            return list(await s.read_tokens() or [])
        finally:
            await s.abort()

    tokens = asyncio.run(scenario())
    assert tokens and tokens[0] == b"r\n"


def test_a_request_written_while_the_session_waits_starts_its_time_limit(tmp_path: Path) -> None:
    """Waiting with nothing asked, no limit runs; a request written meanwhile must wake the
    wait so that its limit does (or a silent worker would be waited for forever)."""

    async def scenario() -> float:
        s = await session(tmp_path, 30.0, Timeouts(startup=0.3, request=0.3))
        try:
            reading = asyncio.ensure_future(s.read_tokens())
            await asyncio.sleep(0.2)
            began = time.monotonic()
            await ask(s)
            try:
                await asyncio.wait_for(reading, 10)
            except WorkerTimeout:
                return time.monotonic() - began
            raise AssertionError("the worker answered, or the read ended, without a timeout")
        finally:
            await s.abort()

    took = asyncio.run(scenario())
    assert took < 5.0
