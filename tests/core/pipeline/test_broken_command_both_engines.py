"""A worker whose command is broken (a bad option) exits before its first request: on
either engine the run stops at once, naming what the worker said, with nothing restarted,
nothing charged and nothing set aside as a dead letter (conversation/policy.broken_command).
Under Spark such a worker used to be restarted and its jobs charged, so ``on_failure:
deadletter`` set every message aside."""

from __future__ import annotations

import pytest

from tests.support.engines import Engine

pytestmark = pytest.mark.timeout(300)


def test_a_worker_with_a_bad_option_stops_the_run_at_once_with_nothing_set_aside(engine: Engine) -> None:
    stages = """
stages:
  - {name: src, type: E, command: ["{PY}", "{TW}", count, "40"]}
  - {name: t, type: T, mode: batch, batch_size: 10, on_failure: deadletter, restart: {max_restarts: 2, backoff: 0.05},
     command: [sh, -c, "echo 't: unknown option --frobnicate' >&2; exit 2"]}
  - {name: sink, type: L, mode: batch, batch_size: 10, command: ["{PY}", "{TW}", append, out.txt]}
"""
    code, log = engine.run(stages)
    assert code == 1, log  # the pipeline failed
    assert "exited before its first request: t: unknown option --frobnicate" in log, log
    assert "restart 1" not in log and "sent again" not in log, log
    assert "dead letter" not in log.lower(), log
    assert not (engine.tmp / "out.txt").exists() or not (engine.tmp / "out.txt").read_text().strip()
