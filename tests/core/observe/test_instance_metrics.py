"""Per-instance counters, the end-to-end latency histogram and the pipeline state in /metrics.

A restarted instance's skew must show beside its siblings; the per-instance figures add up
to the stage's; every committed window is one observation of extracted → committed; the
state gauge says running, draining or failed.
"""

from __future__ import annotations

import asyncio

from etlstage.config.loader import load_config
from etlstage.runtime.pipeline import Pipeline
from tests.conftest import PY
from tests.core.observe.test_metrics_export import samples
from tests.support.live_run import LiveRun
from tests.support.paths import FIXTURES
from tests.support.waiting import wait_for

N = 1_000
STAGES = f"""
    name: skew
    stages:
      - {{name: src, type: E, mode: cyclic, command: ["{{PY}}", "{{TW}}", count, "{N}", "100"]}}
      - {{name: flaky, type: T, mode: batch, batch_size: 20, instances: 2, restart: {{backoff: 0.05}},
         command: ["{PY}", "{FIXTURES / "misbehave.py"}", flags, crash@3]}}
      - {{name: sink, type: L, mode: batch, batch_size: 100, command: ["{{PY}}", "{{TW}}", append, out.txt]}}
"""


def _by(found: dict, name: str, **want: str) -> dict[frozenset, float]:
    return {ls: v for (n, ls), v in found.items() if n == name and set(want.items()) <= ls}


def test_per_instance_counters_add_up_and_show_which_instance_restarted(pdir):
    (pdir.path / "flags").mkdir()
    pdir.write(STAGES)
    out = pdir.path / "skew.prom"
    r = pdir.run("--once", "--metrics-file", str(out))
    assert r.code == 0, r.stderr
    lines = pdir.lines("out.txt")
    assert len(set(lines)) == N  # at least once: the crashed batch's neighbours may come twice
    found = samples(out.read_text())

    restarts = _by(found, "etlstage_instance_restarts_total", stage="flaky")
    assert {dict(ls)["instance"] for ls in restarts} == {"0", "1"}, restarts
    assert sorted(restarts.values()) == [0.0, 1.0]  # one crash, in one instance: the other shows 0
    (stage_restarts,) = _by(found, "etlstage_stage_restarts_total", stage="flaky").values()
    assert sum(restarts.values()) == stage_restarts == 1
    for kind in ("input", "output"):
        per = _by(found, f"etlstage_instance_{kind}_messages_total", stage="flaky")
        (total,) = _by(found, f"etlstage_stage_{kind}_messages_total", stage="flaky").values()
        assert len(per) == 2 and sum(per.values()) == total >= N, (kind, per, total)
    (extracted,) = _by(found, "etlstage_instance_output_messages_total", stage="src").values()
    assert extracted == N
    (loaded,) = _by(found, "etlstage_instance_input_messages_total", stage="sink").values()
    assert loaded == len(lines)

    # one observation of extracted -> committed per committed window
    (windows,) = _by(found, "etlstage_source_windows_committed_total", stage="src").values()
    (count,) = _by(found, "etlstage_source_end_to_end_latency_seconds_count", stage="src", instance="0").values()
    assert count == windows >= N / 100
    (inf,) = _by(found, "etlstage_source_end_to_end_latency_seconds_bucket", stage="src", le="+Inf").values()
    assert inf == count

    state = {dict(ls)["state"]: v for ls, v in _by(found, "etlstage_pipeline_state").items()}
    assert state == {"running": 1.0, "draining": 0.0, "failed": 0.0}


def test_a_failed_run_ends_with_the_failed_state_in_its_metrics(pdir):
    pdir.write(
        """
        name: doomed
        stages:
          - {name: src, type: E, mode: plain, command: ["{PY}", "{TW}", count, "10"]}
          - {name: sink, type: L, mode: batch, restart: {max_restarts: 0},
             command: ["{PY}", "-c", "import sys; sys.exit(3)"]}
        """
    )
    out = pdir.path / "doomed.prom"
    r = pdir.run("--once", "--metrics-file", str(out))
    assert r.code == 1, r.stderr
    state = {dict(ls)["state"]: v for ls, v in _by(samples(out.read_text()), "etlstage_pipeline_state").items()}
    assert state == {"running": 0.0, "draining": 0.0, "failed": 1.0}


def test_the_state_is_draining_once_a_graceful_stop_is_asked(pdir):
    pdir.write(STAGES)
    (pdir.path / "flags").mkdir()
    config = load_config(str(pdir.path / "stages.yaml"))

    async def states() -> list[str]:
        pipeline = Pipeline(config, once=True)
        try:
            seen = [pipeline.state]
            pipeline.stop()
            seen.append(pipeline.state)
            return seen
        finally:
            pipeline.store.close()

    assert asyncio.run(states()) == ["running", "draining"]


def test_a_stop_that_runs_out_of_drain_timeout_ends_in_the_failed_state(pdir):
    """The pipeline itself raised nothing: the run failed because its drain ran out (exit 1)."""
    pdir.write(
        """
        name: stuck
        drain_timeout: 1
        stages:
          - {name: src, type: E, mode: cyclic, poll_interval: 0.1, command: ["{PY}", "{TW}", count, "1000", "5"]}
          - {name: t, type: T, stop_timeout: 1, command: ["{PY}", "{TW}", hang]}
          - {name: sink, type: L, command: ["{PY}", "{TW}", append, out.txt]}
        """
    )
    out = pdir.path / "stuck.prom"
    with LiveRun(pdir.path, "--metrics-file", str(out)) as run:
        wait_for(lambda: _in_flight(run.get("/metrics")[2], "t") > 0, 30, "the hanging worker's request")
        assert run.stop() == 1, run.stderr
    assert _state(out.read_text()) == "failed"


def _state(text: str) -> str | None:
    on = [dict(ls)["state"] for (n, ls), v in samples(text).items() if n == "etlstage_pipeline_state" and v == 1]
    return on[0] if on else None


def _in_flight(text: str, stage: str) -> float:
    return sum(_by(samples(text), "etlstage_stage_requests_in_flight", stage=stage).values())


def test_an_instance_that_took_nothing_shows_0_not_nothing(pdir):
    """With one message for three instances, two of them never get any: their series are 0."""
    pdir.write(
        """
        name: idle
        stages:
          - {name: src, type: E, mode: plain, command: ["{PY}", "{TW}", count, "1"]}
          - {name: t, type: T, instances: 3, command: ["{PY}", "{TW}", upper]}
          - {name: sink, type: L, command: ["{PY}", "{TW}", append, out.txt]}
        """
    )
    out = pdir.path / "idle.prom"
    assert pdir.run("--once", "--metrics-file", str(out)).code == 0
    taken = _by(samples(out.read_text()), "etlstage_instance_input_messages_total", stage="t")
    assert sorted(taken.values()) == [0.0, 0.0, 1.0], taken
