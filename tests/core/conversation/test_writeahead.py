"""Worker-driven batches written ahead of the worker's BNCs, on both engines' conversations.

The supervisor's stage driver and the Spark task's ``StageWorker`` run in this process (no
JVM, ``tests/support/parity.py``) with ``tests/fixtures/ahead.py``: in ``greedy`` mode it
writes no BNC before it holds its whole batch (its size, or EOB), so it answers only if the
batch was written ahead; with ``check`` it fails when it finds a message of its next batch
in its pipe before it answered.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

import pytest

from etlstage.config.model import RestartPolicy, StageConfig, Timeouts
from etlstage.kit.stats import StageStats
from etlstage.kit.transport import ProcessTransport, Transport
from etlstage.protocol.framing import count_eom
from etlstage.protocol.markers import Markers
from etlstage.protocol.scenario import Scenario
from etlstage.protocol.vocabulary import BatchDriver, Mode, StageType
from etlstage.runtime.driver import TransformDriver
from etlstage.runtime.flow import Inbox, Job, Piece, Window
from etlstage.runtime.tasks import run_all
from tests.support import parity
from tests.support.paths import FIXTURES
from tests.support.waiting import wait_for

AHEAD = str(FIXTURES / "ahead.py")


def stage(type: str, *args: str, **kw) -> StageConfig:
    kw.setdefault("restart", RestartPolicy(max_restarts=2, backoff=0.05, backoff_max=0.4))
    kw.setdefault("timeouts", Timeouts(startup=20, request=20))
    return StageConfig(
        name="s",
        type=StageType(type),
        command=[sys.executable, AHEAD, *args],
        mode=Mode.BATCH,
        markers=Markers(),
        batch_driver=BatchDriver.WORKER,
        stop_timeout=5,
        **kw,
    )


def messages(n: int) -> list[bytes]:
    return [b"m%03d" % i for i in range(n)]


def both(stage_for, inputs: list[list[bytes]], tmp_path: Path) -> tuple[parity.Outcome, parity.Outcome]:
    (tmp_path / "sup").mkdir()
    (tmp_path / "spark").mkdir()
    sup = parity.supervisor(stage_for(tmp_path / "sup"), inputs, str(tmp_path / "sup"))
    spk = parity.spark(stage_for(tmp_path / "spark"), inputs, str(tmp_path / "spark"))
    return sup, spk


def loaded(path: Path) -> list[list[str]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_a_worker_finds_its_batch_written_ahead_and_nothing_of_the_next_one(tmp_path):
    """The whole batch is in the pipe before the first BNC (``greedy`` answers at all), and
    nothing past it (``check``): every message answered once, in order, on both engines."""
    inputs = [messages(30)[:7], [], messages(30)[7:18], messages(30)[18:]]
    sup, spk = both(lambda d: stage("T", "greedy", "check", batch_size=4), inputs, tmp_path)
    assert sup.error is None and spk.error is None, (sup.error, spk.error)
    assert sup.outputs == spk.outputs == messages(30)
    assert sup.restarts == spk.restarts == []


@pytest.mark.parametrize(
    "keys, batches",
    [
        ({"batch_size": 8}, [8, 5]),  # the input's end (a window's barrier) closes the last one
        ({"batch_size": 8, "batch_bytes": 22}, [4, 4, 4, 1]),  # 5-byte messages: batch_bytes closes each
    ],
    ids=["barrier", "batch_bytes"],
)
def test_a_batch_closed_short_gets_eob_after_its_messages_written_ahead(keys, batches, tmp_path):
    """The greedy loader reads a short batch's messages and its EOB before it writes any
    BNC: EOB followed the messages written ahead, not their BNCs; both engines alike."""
    inputs = [messages(13)[:6], messages(13)[6:]]
    sup, spk = both(lambda d: stage("L", "greedy", "check", f"load={d / 'out.jsonl'}", **keys), inputs, tmp_path)
    assert sup.error is None and spk.error is None, (sup.error, spk.error)
    seen = loaded(tmp_path / "sup" / "out.jsonl")
    assert [len(b) for b in seen] == batches
    assert [m for b in seen for m in b] == [m.decode() for m in messages(13)]
    assert loaded(tmp_path / "spark" / "out.jsonl") == seen


def test_a_crash_mid_batch_sends_its_messages_written_ahead_again_once(tmp_path):
    """The worker dies holding its first batch, written ahead, after two BNCs: the batch goes
    to the next worker whole, and every message is loaded exactly once, on both engines."""
    inputs = [messages(11)]

    def loader(d: Path) -> StageConfig:
        return stage("L", "greedy", "check", f"crash={d}", f"load={d / 'out.jsonl'}", batch_size=4)

    sup, spk = both(loader, inputs, tmp_path)
    assert sup.error is None and spk.error is None, (sup.error, spk.error)
    for engine, outcome in (("sup", sup), ("spark", spk)):
        assert (tmp_path / engine / "crashed").exists()
        assert len(outcome.restarts) == 1, outcome.restarts
        assert loaded(tmp_path / engine / "out.jsonl") == [
            ["m000", "m001", "m002", "m003"],
            ["m004", "m005", "m006", "m007"],
            ["m008", "m009", "m010"],
        ]


def test_a_stray_eop_before_the_bncs_of_messages_written_ahead_is_a_violation():
    """Written ahead, a batch is closed before its BNCs come; an answer before all of them is
    still caught (the reply rules count the BNCs)."""
    from etlstage.protocol.framing import EOP, Bncs
    from etlstage.protocol.replies import Exchange, ReplyRules

    rules: ReplyRules[Exchange] = ReplyRules(results=True, worker_driven=True, batch_size=4)
    batch = Exchange(messages=4, closed=True)  # filled: all four written ahead
    rules.sent(batch)
    assert rules.feed([Bncs(2)]).violation is None
    reading = rules.feed([b"r\n", EOP])
    assert reading.violation is not None and not reading.completed
    assert "EOP after 3 message(s) of a batch of 4" in reading.violation.problem
    again = Exchange(messages=4, closed=True)
    rules = ReplyRules(results=True, worker_driven=True, batch_size=4)
    rules.sent(again)
    too_many = rules.feed([Bncs(4)]).violation
    assert too_many is not None and "BNC after message 4 of a batch of 4 — that message filled the batch" in (
        too_many.problem
    )
    fine = ReplyRules(results=True, worker_driven=True, batch_size=4)
    short = Exchange(messages=2, closed=True)  # closed by EOB after two messages
    fine.sent(short)
    assert fine.feed([Bncs(2), b"r\n", EOP]).completed == [short]


def trickle(tmp_path: Path, linger: float, then: list[bytes], rest: list[bytes]) -> list[list[str]]:
    """The supervisor's greedy loader (batch_size 8) given three messages; once they are taken
    into a batch, ``then``; once a batch is loaded, ``rest``: the batches it loaded."""
    st = stage("L", "greedy", "check", f"load={tmp_path / 'out.jsonl'}", batch_size=8, linger=linger)
    eom = st.markers.EOM
    out = tmp_path / "out.jsonl"

    async def spawn(s: StageConfig, scenario: Scenario, label: str) -> Transport:
        env = {**os.environ, **scenario.to_env()}
        return await ProcessTransport.spawn(scenario.expand(s.argv()), env, None, label)

    async def emit(piece: Piece) -> None:
        pass

    def deadletter(s: StageConfig, job: Job, error: str) -> None:
        raise AssertionError(error)

    async def run() -> None:
        window = Window("w", 0, 2)
        inbox = Inbox(eom, 1 << 20)
        stats = StageStats("s", "L")
        driver = TransformDriver(st, 1, str(tmp_path), spawn, stats, [inbox], emit, deadletter)

        def put(ms: list[bytes]) -> None:
            if ms:
                block = b"".join(m + eom for m in ms)
                window.add(1, count_eom(block, eom))
                inbox.put_nowait(Piece(block, len(ms), window))

        async def fill() -> None:
            put(messages(3))
            await asyncio.to_thread(wait_for, lambda: not len(inbox), 10, "the first three taken")
            put(then)
            await asyncio.to_thread(wait_for, out.exists, 60, "a batch loaded")
            put(rest)
            window.close()
            inbox.close()

        try:
            await run_all(driver.run(), fill())
        finally:
            await driver.abort_all()

    asyncio.run(run())
    return loaded(out)


def test_messages_that_come_while_a_batch_is_open_are_written_ahead_into_it(tmp_path):
    """The supervisor: three messages start a batch; five more come while it is open and
    fill it, written ahead of the BNCs (the greedy loader holds all eight before its first
    BNC, and answers long before ``linger`` could close the batch short)."""
    batches = trickle(tmp_path, 30, messages(8)[3:], messages(10)[8:])
    assert batches == [[m.decode() for m in messages(8)], ["m008", "m009"]]


def test_linger_closes_a_batch_written_ahead_with_eob(tmp_path):
    """The supervisor: three messages come, then nothing for longer than ``linger``: EOB
    follows them (the greedy loader answers a batch of three), and the rest of the window
    makes the next batch."""
    batches = trickle(tmp_path, 0.1, [], messages(5)[3:])
    assert batches == [["m000", "m001", "m002"], ["m003", "m004"]]
