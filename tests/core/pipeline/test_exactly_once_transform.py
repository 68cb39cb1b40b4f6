"""A T-worker's failure duplicates nothing downstream: its answered jobs sent again hand
on only results that had not gone on already (docs/protocol.md: answers in step)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from tests.support.engines import Engine

pytestmark = [pytest.mark.timeout(300), pytest.mark.slow]  # ~10 s each on a loaded machine

N, CYCLE, POISON = 600, 150, "313"


def pipeline(on_failure: str, t_command: str = f'["{{PY}}", "{{TW}}", poison, "{POISON}"]', extra: str = "") -> str:
    """The issue's run, smaller: a cyclic extractor, a T that dies on every batch holding
    the poison row, an append loader (not idempotent)."""
    return f"""
stages:
  - {{name: src, type: E, mode: cyclic, command: ["{{PY}}", "{{TW}}", count, "{N}", "{CYCLE}"]}}
  - {{name: t, type: T, mode: batch, batch_size: 10, on_failure: {on_failure}, {extra}
     restart: {{max_restarts: 2, backoff: 0.05}}, command: {t_command}}}
  - {{name: sink, type: L, mode: batch, batch_size: 100, command: ["{{PY}}", "{{TW}}", append, out.txt]}}
"""


def test_a_poison_row_under_deadletter_loads_every_other_row_exactly_once(engine: Engine) -> None:
    code, log = engine.run(pipeline("deadletter"))
    assert code == 0, log[-3000:]
    got = Counter(engine.lines("out.txt"))
    assert sorted(got, key=int) == [str(i) for i in range(N) if str(i) != POISON], log[-3000:]
    assert set(got.values()) == {1}, sorted(m for m, n in got.items() if n > 1)[:20]
    if engine.name == "supervisor":  # the run said what it did not hand on again
        assert "not handed on again (the same results went on before the failure)" in log, log[-3000:]


def test_a_poison_row_under_fail_stops_with_nothing_loaded_twice(engine: Engine) -> None:
    code, log = engine.run(pipeline("fail"))
    assert code == 1 and "on_failure=fail stops the pipeline" in log, log[-3000:]
    got = Counter(engine.lines("out.txt"))
    assert got, "the rows before the poison's window were loaded"
    assert POISON not in got
    assert set(got.values()) == {1}, sorted(m for m, n in got.items() if n > 1)[:20]


def test_a_stage_that_is_not_deterministic_keeps_at_least_once(engine: Engine) -> None:
    """``deterministic: false``: every re-answer goes on; nothing is lost, repeats may come."""
    code, log = engine.run(pipeline("deadletter", extra="deterministic: false,"))
    assert code == 0, log[-3000:]
    got = Counter(engine.lines("out.txt"))
    assert sorted(got, key=int) == [str(i) for i in range(N) if str(i) != POISON]
    if engine.name == "supervisor":
        assert max(got.values()) == 2, "the poison's answered neighbours went on twice"
        assert "not handed on again" not in log


TAG_PID = """\
import os, sys
from etlstage.worker import run_transformer
def f(ms):
    if b"%s" in ms:
        os._exit(7)
    return [m + b" " + str(os.getpid()).encode() for m in ms]
run_transformer(f)
"""


def test_a_re_answer_unlike_the_first_is_handed_on_whole(tmp_path: Path, request: pytest.FixtureRequest) -> None:
    """A worker that says it is deterministic but is not (it tags results with its pid):
    a re-answer that differs from what went on is handed on (never dropped), with a warning."""
    script = tmp_path / "tag_pid.py"
    script.write_text(TAG_PID % POISON.encode().decode())
    engine = Engine("supervisor", request, tmp_path)
    code, log = engine.run(pipeline("deadletter", t_command=f'["{{PY}}", "{script}"]'))
    assert code == 0, log[-3000:]
    rows = Counter(line.split(" ")[0] for line in engine.lines("out.txt"))
    assert sorted(rows, key=int) == [str(i) for i in range(N) if str(i) != POISON]
    assert max(rows.values()) == 2, "re-answers from the new process went on beside the first ones"
    assert "unlike its earlier answer; handed on whole" in log, log[-3000:]
