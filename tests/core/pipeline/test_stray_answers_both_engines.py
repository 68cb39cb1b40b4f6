"""Answers out of step with their requests lose nothing, on either engine.

A worker names no request in its answers, so a stray or repeated EOP shifts what
follows.  Whichever engine runs the pipeline, a run either loads every message or fails
non-zero naming the stage, and a run after it (the worker fixed) loads what was left.
The Spark engine runs in the test run's one local session (``spark`` fixture), the
supervisor as the CLI a user runs.
"""

from __future__ import annotations

import re

import pytest

from tests.support.engines import Engine
from tests.support.paths import FIXTURES

pytestmark = pytest.mark.timeout(300)


def transform_pipeline(n: int, faults: str, instances: int = 2, cycle: int = 0, keyed: bool = False) -> str:
    """``keyed``: the T's messages dealt to its instances by content (``partition_by: ""``),
    so that each gets about its share; unkeyed, whichever instance is free takes a batch."""
    cyclic = f'mode: cyclic, command: ["{{PY}}", "{{TW}}", count, "{n}", "{cycle}"]'
    plain = f'command: ["{{PY}}", "{{TW}}", count, "{n}"]'
    key = 'partition_by: "", ' if keyed else ""
    return f"""
stages:
  - {{name: src, type: E, {cyclic if cycle else plain}}}
  - {{name: t, type: T, mode: batch, batch_size: 50, instances: {instances}, {key}
     restart: {{max_restarts: 5, backoff: 0.05}}, command: ["{{PY}}", "{{MISBEHAVE}}", "{{FLAGS}}", {faults}]}}
  - {{name: sink, type: L, mode: batch, batch_size: 100, command: ["{{PY}}", "{{TW}}", append, out.txt]}}
"""


def loaded(engine: Engine) -> set[int]:
    return {int(x) for x in engine.lines("out.txt")}


def test_one_stray_eop_per_transform_worker_loses_nothing(engine: Engine) -> None:
    """Two instances, batches of 50, each worker writes one extra EOP after its 3rd answer:
    the answers it shifted are sent again after the restart. The messages are dealt to the
    instances by content: unkeyed, one instance once took all 40 batches while the other's
    worker was starting, and its stray never came."""
    code, log = engine.run(transform_pipeline(2000, '"each-instance", "stray@3"', keyed=True))
    assert code == 0, log[-3000:]
    assert loaded(engine) == set(range(2000)), log[-3000:]
    assert sorted(p.name for p in (engine.tmp / "flags").iterdir()) == ["stray@3.0", "stray@3.1"]


def test_two_eops_per_answer_fail_the_run_naming_the_stage_and_a_fixed_worker_loads_all(engine: Engine) -> None:
    """Every answer ends with two EOPs, over cycles of one batch each: no run may end 0
    with messages missing; the run fails naming the stage, and a run with the worker
    fixed loads everything (nothing was committed that was not loaded)."""
    code, log = engine.run(transform_pipeline(500, '"stray@*"', instances=1, cycle=50))
    assert code != 0, log[-3000:]
    assert "protocol violation by t" in log, log[-3000:]
    code, log = engine.run(transform_pipeline(500, '"none@0"', instances=1, cycle=50))
    assert code == 0, log[-3000:]
    assert loaded(engine) == set(range(500)), log[-3000:]


def test_an_extractors_late_stray_eop_is_caught_before_the_next_request(engine: Engine) -> None:
    """Supervisor-managed offsets, windows of 500, one window in flight: the extractor
    writes a stray EOP after its first answer, while that window is in the T-stage (its
    busy file exists; it takes a second), so before the next request.  Taken as the next
    window's answer, it would make that window empty: half the messages lost and
    ``--once`` over.  It is caught before the request, and the extractor restarted."""
    late = str(FIXTURES / "late_stray.py")
    busy = engine.tmp / "busy"
    stages = f"""
max_inflight_windows: 1
stages:
  - {{name: src, type: E, mode: cyclic, offsets: supervisor, offset_policy: {{type: counter, start: 0, step: 500}},
     restart: {{backoff: 0.05}}, command: ["{{PY}}", "{late}", "2000", "{{FLAGS}}", "1", "{busy}"]}}
  - {{name: t, type: T, mode: batch, batch_size: 1000, command: ["{{PY}}", "{{TW}}", slow, "1", "{busy}"]}}
  - {{name: sink, type: L, mode: batch, batch_size: 1000, command: ["{{PY}}", "{{TW}}", append, out.txt]}}
"""
    code, log = engine.run(stages)
    assert code == 0, log[-3000:]
    assert (engine.tmp / "flags" / "late-stray@1").exists()
    assert loaded(engine) == set(range(2000)), log[-3000:]
    assert re.search(r"^src +E +.* 1$", log, re.M), log[-3000:]  # the summary: src restarted once


def load_pipeline(n: int, faults: str) -> str:
    return f"""
stages:
  - {{name: src, type: E, command: ["{{PY}}", "{{TW}}", count, "{n}"]}}
  - {{name: t, type: T, mode: batch, batch_size: 100, command: ["{{PY}}", "{{TW}}", pass]}}
  - {{name: sink, type: L, mode: batch, batch_size: 100, restart: {{max_restarts: 3, backoff: 0.05}},
     command: ["{{PY}}", "{{MISBEHAVE}}", "{{FLAGS}}", append=out.txt, {faults}]}}
"""


def test_a_loader_that_writes_a_stray_eop_then_crashes_loses_nothing(engine: Engine) -> None:
    """The L-worker writes an extra EOP after its 3rd answer and dies on the next batch:
    had the extra EOP been taken as that batch's acknowledgement, its 100 messages would
    be lost behind exit 0."""
    code, log = engine.run(load_pipeline(1000, '"stray@3", "crash@4"'))
    assert sorted(p.name for p in (engine.tmp / "flags").iterdir()) == ["crash@4", "stray@3"]
    if code != 0:
        assert "sink" in log, log[-3000:]
        code, log = engine.run(load_pipeline(1000, '"none@0"'))
        assert code == 0, log[-3000:]
    assert loaded(engine) == set(range(1000)), log[-3000:]


def test_a_slow_loaders_stray_eop_gives_cause_for_doubt_and_its_late_answer_is_caught(engine: Engine) -> None:
    """A loader that takes 0.5 s a batch writes a stray EOP with its first answer: the
    stray acknowledges batch 2 at once, whose real EOP comes 1 s later. Answers in a
    worker's own time are confirmed by one short check; this one came right behind the
    previous EOP, so the window (the micro-batch) waits for two settle times of twice the
    slowest answer, the late EOP shows with nothing outstanding, and batch 2 is sent
    again: exit 0, every message loaded. (Taken for an answer in step, the window would
    commit on the stray's word alone.)"""
    stages = """
stages:
  - {name: src, type: E, mode: cyclic, command: ["{PY}", "{TW}", count, "400", "100"]}
  - {name: sink, type: L, mode: batch, batch_size: 50, restart: {max_restarts: 3, backoff: 0.05},
     command: ["{PY}", "{MISBEHAVE}", "{FLAGS}", append=out.txt, wait=0.5, "stray@1", "slow@2"]}
"""
    code, log = engine.run(stages)
    assert code == 0, log[-3000:]
    assert loaded(engine) == set(range(400)), log[-3000:]
    assert sorted(p.name for p in (engine.tmp / "flags").iterdir()) == ["slow@2", "stray@1"]
