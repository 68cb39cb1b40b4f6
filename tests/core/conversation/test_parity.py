"""Both engines' conversations, the same worker programs, the same input: the same outcome.

The supervisor's stage driver and the Spark task's ``StageWorker`` run in this process
(no JVM, see ``tests/support/parity.py``) over the scenarios of the protocol (single
requests, supervisor- and worker-driven batches, T and L) with the stage keys both
engines honour; a difference in results, batches, dead letters, restarts or errors
fails the test.
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import pytest

from etlstage.config.model import RestartPolicy, StageConfig, Timeouts
from etlstage.errors import EXITED_BETWEEN_CYCLES
from etlstage.protocol.markers import Markers
from etlstage.protocol.vocabulary import BatchDriver, Mode, Offsets, OnFailure, StageType
from tests.support import parity
from tests.support.paths import FIXTURES

TW = str(FIXTURES / "tw.py")
MISBEHAVE = str(FIXTURES / "misbehave.py")


def make_stage(type: str, mode: str, command: list[str], **kw) -> StageConfig:
    kw.setdefault("restart", RestartPolicy(max_restarts=2, backoff=0.05, backoff_max=0.4))
    kw.setdefault("timeouts", Timeouts(startup=30, request=30))
    kw.setdefault("stop_timeout", 5)
    return StageConfig(
        name="s",
        type=StageType(type),
        command=[sys.executable, *command],
        mode=Mode(mode),
        markers=Markers(),
        **kw,
    )


def messages(n: int, width: int = 3) -> list[bytes]:
    return [b"m%0*d" % (width, i) for i in range(n)]


def blocks(ms: list[bytes], *sizes: int) -> list[list[bytes]]:
    """``ms`` cut into blocks of these sizes (the rest in a last one)."""
    out, start = [], 0
    for size in sizes:
        out.append(ms[start : start + size])
        start += size
    return [*out, ms[start:]]


def both(stage_for, inputs, tmp_path: Path) -> tuple[parity.Outcome, parity.Outcome]:
    (tmp_path / "sup").mkdir()
    (tmp_path / "spark").mkdir()
    sup = parity.supervisor(stage_for(tmp_path / "sup"), inputs, str(tmp_path / "sup"))
    spk = parity.spark(stage_for(tmp_path / "spark"), inputs, str(tmp_path / "spark"))
    return sup, spk


T_CASES = {
    "single": dict(mode="single"),
    "single, prefetch 4": dict(mode="single", prefetch=4),
    "single, batch_bytes": dict(mode="single", batch_bytes=20),
    "batch": dict(mode="batch", batch_size=4),
    "batch, batch_bytes": dict(mode="batch", batch_size=8, batch_bytes=22),
    "worker-driven": dict(mode="batch", batch_size=4, batch_driver=BatchDriver.WORKER),
    "worker-driven, batch_bytes": dict(mode="batch", batch_size=8, batch_bytes=22, batch_driver=BatchDriver.WORKER),
}


@pytest.mark.parametrize("case", T_CASES)
def test_a_transformer_gives_the_same_results(case, tmp_path):
    kw = dict(T_CASES[case])
    mode = kw.pop("mode")
    inputs = blocks(messages(30), 7, 0, 11)
    sup, spk = both(lambda d: make_stage("T", mode, [TW, "fanout"], **kw), inputs, tmp_path)
    assert sup.error is None and spk.error is None
    assert spk.outputs == sup.outputs
    assert sup.outputs  # the worker did answer


L_CASES = {
    "single": dict(mode="single"),
    "batch": dict(mode="batch", batch_size=5),
    "batch, batch_bytes": dict(mode="batch", batch_size=5, batch_bytes=12),
    "batch, batch_bytes below a message": dict(mode="batch", batch_size=5, batch_bytes=3),
    "worker-driven": dict(mode="batch", batch_size=5, batch_driver=BatchDriver.WORKER),
    "worker-driven, batch_bytes": dict(mode="batch", batch_size=5, batch_bytes=12, batch_driver=BatchDriver.WORKER),
    "worker-driven, batch_bytes below a message": dict(
        mode="batch", batch_size=5, batch_bytes=2, batch_driver=BatchDriver.WORKER
    ),
}


@pytest.mark.parametrize("case", L_CASES)
def test_a_loader_is_given_the_same_batches(case, tmp_path):
    """The loader writes each batch it is given as one line: the engines cut the same ones."""
    kw = dict(L_CASES[case])
    mode = kw.pop("mode")
    inputs = blocks(messages(23, width=2), 3, 9)
    sup, spk = both(lambda d: make_stage("L", mode, [TW, "batches", str(d / "out.jsonl")], **kw), inputs, tmp_path)
    assert sup.error is None and spk.error is None
    seen = [(tmp_path / e / "out.jsonl").read_text().splitlines() for e in ("sup", "spark")]
    assert seen[1] == seen[0]
    assert len(seen[0]) > 1


def test_a_poisoned_batch_is_isolated_and_dead_lettered_alike(tmp_path):
    inputs = blocks([b"a", b"b", b"c", b"poison", b"d", b"e", b"f", b"g"], 3)
    sup, spk = both(
        lambda d: make_stage(
            "T", "batch", [TW, "poison", "poison"], batch_size=4, on_failure=OnFailure.DEADLETTER, prefetch=1
        ),
        inputs,
        tmp_path,
    )
    assert sup.error is None and spk.error is None
    assert spk.deadletters == sup.deadletters == [[b"poison"]]
    assert spk.distinct() == sup.distinct() == [b"a", b"b", b"c", b"d", b"e", b"f", b"g"]
    assert spk.restarts == sup.restarts


def test_on_failure_fail_stops_both_with_the_same_error(tmp_path):
    inputs = [[b"a", b"poison", b"b"]]
    sup, spk = both(
        lambda d: make_stage("T", "batch", [TW, "poison", "poison"], batch_size=2, prefetch=1), inputs, tmp_path
    )
    assert sup.error is not None and "on_failure=fail stops the pipeline" in sup.error
    assert spk.error == sup.error
    assert spk.restarts == sup.restarts


@pytest.mark.parametrize("case", ["single", "batch", "worker-driven"])
def test_a_worker_that_crashes_once_is_restarted_and_sent_its_work_again_alike(case, tmp_path):
    kw = dict(T_CASES[case])
    mode = kw.pop("mode")
    inputs = blocks(messages(12), 5)
    sup, spk = both(lambda d: make_stage("T", mode, [MISBEHAVE, str(d), "crash@2"], **kw), inputs, tmp_path)
    assert sup.error is None and spk.error is None
    assert spk.distinct() == sup.distinct() == sorted(messages(12))
    assert spk.restarts == sup.restarts and len(sup.restarts) == 1


def unlabelled(error: str | None) -> str | None:
    """An error's first line less the worker's label, which each engine words its own way."""
    return None if error is None else error.split(" ", 1)[1]


@pytest.mark.parametrize(
    ("script", "said"),
    [
        ("echo 'w: unknown option --frobnicate' >&2; exit 2", "w: unknown option --frobnicate"),
        ("exit 0", "(it wrote nothing to stderr)"),
    ],
    ids=["bad option", "silent exit"],
)
def test_a_worker_that_exits_before_its_first_request_stops_both_at_once(script, said, tmp_path):
    """A broken command (a bad option, a missing script) is not a bad message: under Spark
    such a worker was restarted and its job charged, so the run ended in on_failure (dead
    letters under deadletter).  Both engines now stop the stage at once, nothing set aside.
    (A shell, not Python: it exits well within the start-up quiet on a loaded machine too.)"""

    def stage(d: Path) -> StageConfig:
        made = make_stage("T", "batch", [], batch_size=2, on_failure=OnFailure.DEADLETTER)
        return dataclasses.replace(made, command=["sh", "-c", script])

    sup, spk = both(stage, [[b"a", b"b", b"c"]], tmp_path)
    assert unlabelled(sup.error) == f"exited before its first request: {said}"
    assert unlabelled(spk.error) == unlabelled(sup.error)
    assert spk.restarts == sup.restarts == []
    assert spk.deadletters == sup.deadletters == []
    assert spk.outputs == sup.outputs == []


def test_a_banner_before_the_first_request_is_a_violation_on_both(tmp_path):
    """Output before the first request answers nothing: both engines watch a fresh worker
    for the start-up quiet (under Spark the banner was taken for the first answer's result)."""
    sup, spk = both(
        lambda d: make_stage("T", "single", [MISBEHAVE, str(d), "banner"], restart=RestartPolicy(max_restarts=1)),
        [[b"a", b"b"]],
        tmp_path,
    )
    assert sup.error is not None and "failed 2 times in a row" in sup.error, sup.error
    assert unlabelled(spk.error) == unlabelled(sup.error)
    assert b"misbehave ready" not in spk.outputs + sup.outputs
    assert spk.restarts == sup.restarts and len(sup.restarts) == 1


def test_an_answer_in_doubt_is_confirmed_by_two_quiet_checks_on_both(tmp_path):
    """A stray EOP written right behind answer 1 answers request 2 at once (in doubt); the
    real answer 2 comes after one settle time but within two.  One quiet check (Spark's
    before) released request 2 with no result: message b was lost.  Two checks see the late
    answer, and both engines send the held requests again."""
    sup, spk = both(
        lambda d: make_stage("T", "single", [MISBEHAVE, str(d), "wait=0.3", "stray@1", "slow@2"], prefetch=2),
        [[b"a", b"b"]],
        tmp_path,
    )
    assert sup.error is None and spk.error is None
    assert spk.distinct() == sup.distinct() == [b"a", b"b"]


def test_a_request_timeout_stops_both_with_the_same_error(tmp_path):
    quick = Timeouts(startup=0.5, request=0.5)
    sup, spk = both(
        lambda d: make_stage(
            "T", "single", [TW, "hang"], prefetch=1, timeouts=quick, restart=RestartPolicy(max_restarts=0)
        ),
        [[b"a", b"b"]],
        tmp_path,
    )
    assert sup.error == (
        "stage 's': a request of 1 message(s) failed 1 times; on_failure=fail stops the pipeline "
        "(nothing committed past it)."
    )
    assert spk.error == sup.error
    assert spk.restarts == sup.restarts == []


@pytest.mark.parametrize(
    "offsets, requests",
    [
        ("worker", [b"", b"", b"", b""]),
        ("supervisor", [b'{"start":0,"end":4}', b'{"start":4,"end":9}', b'{"start":20,"end":30}']),
    ],
)
def test_a_cyclic_extractor_answers_each_request_alike(offsets, requests, tmp_path):
    """Worker offsets: 4 per cycle, 10 in all, then empty cycles; supervisor offsets: [start, end)."""
    results = []
    for engine, drive in (("sup", parity.supervisor_cycles), ("spark", parity.spark_cycles)):
        (tmp_path / engine).mkdir()
        stage = make_stage("E", "cyclic", [TW, "count", "10", "4"], offsets=Offsets(offsets))
        results.append(drive(stage, requests, str(tmp_path / engine)))
    (sup_cycles, sup), (spk_cycles, spk) = results
    assert sup.error is None and spk.error is None
    assert spk_cycles == sup_cycles
    assert sum(map(len, sup_cycles)) > 0
    assert spk.restarts == sup.restarts == []


def test_a_plain_extractor_gives_the_same_messages(tmp_path):
    (tmp_path / "sup").mkdir()
    (tmp_path / "spark").mkdir()
    stage = make_stage("E", "plain", [TW, "count", "25"])
    sup_cycles, sup = parity.supervisor_cycles(stage, [], str(tmp_path / "sup"))
    spk_cycles, spk = parity.spark_plain(stage, str(tmp_path / "spark"))
    assert sup.error is None and spk.error is None
    assert spk_cycles == sup_cycles == [[b"%d" % i for i in range(25)]]


def test_a_plain_extractor_silent_beyond_its_idle_limit_fails_alike(tmp_path):
    """The idle limit runs from the start, before any output, on both engines.  (What
    follows differs by design: the supervisor restarts a plain extractor, the Spark
    engine stops the query — docs/spark-engine.md.)"""
    (tmp_path / "sup").mkdir()
    (tmp_path / "spark").mkdir()
    stage = make_stage(
        "E",
        "plain",
        [TW, "hang"],
        timeouts=Timeouts(startup=30, idle=0.5),
        restart=RestartPolicy(max_restarts=0),
        stop_timeout=0.5,
    )
    _, sup = parity.supervisor_cycles(stage, [], str(tmp_path / "sup"))
    _, spk = parity.spark_plain(stage, str(tmp_path / "spark"))
    assert sup.error is not None and "idle timeout of 0.5s" in sup.error
    assert spk.error is not None and "idle timeout of 0.5s" in spk.error


def test_a_plain_extractors_start_up_limit_ends_at_its_first_message_alike(tmp_path):
    """The start-up limit runs until a plain extractor's first output, not over its whole
    run: one that writes at once and then runs past that limit is not timed out."""
    (tmp_path / "sup").mkdir()
    (tmp_path / "spark").mkdir()
    slow = "import sys, time\nfor i in range(3):\n    print(i, flush=True)\n    time.sleep(0.6)\n"
    stage = make_stage(
        "E", "plain", ["-c", slow], timeouts=Timeouts(startup=0.5), restart=RestartPolicy(max_restarts=0)
    )
    sup_cycles, sup = parity.supervisor_cycles(stage, [], str(tmp_path / "sup"))
    spk_cycles, spk = parity.spark_plain(stage, str(tmp_path / "spark"))
    assert sup.error is None and spk.error is None, (sup.error, spk.error)
    assert spk_cycles == sup_cycles == [[b"0", b"1", b"2"]]


# Each answers its first request and exits, leaving a child that keeps its stdout open (and
# closes its own stdin), so the engine cannot see the end of stdout before the next request:
# - the request meets a broken pipe: the child writes the answer once the worker has exited;
# - the request reaches the pipe and is never read: the worker exits a moment after answering.
ANSWER_THEN_EXIT = {
    "broken-pipe": (
        "import os, sys, time\n"
        "sys.stdin.buffer.readline()\n"
        "parent = os.getpid()\n"
        "if os.fork() == 0:\n"
        "    os.close(0)\n"
        "    while os.getppid() == parent: time.sleep(0.01)\n"
        "    os.write(1, b'a' + bytes([10, 0])); time.sleep(1.5); os._exit(0)\n"
    ),
    "unread-request": (
        "import os, sys, time\n"
        "sys.stdin.buffer.readline()\n"
        "os.write(1, b'a' + bytes([10, 0]))\n"
        "if os.fork() == 0:\n"
        "    os.close(0); time.sleep(1.5); os._exit(0)\n"
        "time.sleep(0.3)\n"
    ),
}


@pytest.mark.parametrize("how", sorted(ANSWER_THEN_EXIT))
def test_an_extractor_gone_between_cycles_is_named_so_however_it_shows(how, tmp_path):
    """Whether the end of its stdout, a broken pipe or an unanswered request shows first is a
    race; the report must not depend on it (a CI run failed on it)."""
    results = []
    for engine, drive in (("sup", parity.supervisor_cycles), ("spark", parity.spark_cycles)):
        (tmp_path / engine).mkdir()
        stage = make_stage("E", "cyclic", ["-c", ANSWER_THEN_EXIT[how]], restart=RestartPolicy(max_restarts=0))
        results.append(drive(stage, [b"", b""], str(tmp_path / engine)))
    (sup_cycles, sup), (spk_cycles, spk) = results
    assert sup_cycles[0] == spk_cycles[0] == [b"a"]
    for out in (sup, spk):
        assert out.error is not None and EXITED_BETWEEN_CYCLES in out.error, out.error
