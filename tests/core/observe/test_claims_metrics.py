"""Every /metrics figure of the supervisor's live state, from a pipeline whose windows, input
buffers and checkpoints are set by hand (no processes): the gauges no run-time test pins
down (queued messages and bytes, requests in flight, windows in flight, the committed
offset and time and when they were committed, the build) carry exactly the state's values."""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from etlstage import __version__
from etlstage.config.loader import parse_config
from etlstage.observe.metrics import PipelineCollector
from etlstage.observe.server import pipeline_snapshot
from etlstage.runtime.flow import Piece
from etlstage.runtime.pipeline import Pipeline, Source
from etlstage.runtime.runner import run_pipeline
from tests.support.paths import FIXTURES

NOOP = f'["{sys.executable}", "-c", "pass"]'


def _pipeline(tmp_path: Path) -> Pipeline:
    text = f"""
name: demo
state_dir: {tmp_path / "state"}
stages:
  - {{name: src, type: E, mode: cyclic, offsets: supervisor, offset_policy: {{type: counter, start: 0, step: 10}},
     command: {NOOP}}}
  - {{name: clock, type: E, mode: cyclic, offsets: supervisor,
     offset_policy: {{type: time, start: "2026-11-01T00:00:00Z", step: P1D}}, command: {NOOP}}}
  - {{name: t, type: T, mode: batch, batch_size: 5, command: {NOOP}}}
  - {{name: sink, type: L, command: {NOOP}}}
"""
    p = Pipeline(parse_config(text, base_dir=str(tmp_path)))
    for label, stage in (("src", 0), ("clock", 1)):
        p.sources[label] = Source(label, p.config.stages[stage])
    return p


def _samples(p: Pipeline) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    registry = CollectorRegistry()
    registry.register(PipelineCollector(lambda: pipeline_snapshot(p)))
    out = {}
    for fam in text_string_to_metric_families(generate_latest(registry).decode()):
        for s in fam.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def _one(samples: dict[tuple[str, frozenset[tuple[str, str]]], float], name: str, **labels: str) -> float:
    found = [v for (n, ls), v in samples.items() if n == name and set(labels.items()) <= ls]
    assert len(found) == 1, (name, labels, found)
    return found[0]


def test_live_gauges_and_checkpoints_on_metrics(tmp_path: Path) -> None:
    p = _pipeline(tmp_path)
    before = time.time()
    done = p.open_window("src", b'{"start":0,"end":10}')  # committed: its end is the offset
    done.close()
    open_ = p.open_window("src", b'{"start":10,"end":20}')  # in flight, with 3 messages queued at t
    open_.add(1, 3)
    open_.close()
    p.inputs["t"][0].put_nowait(Piece(b"a\nbb\nccc\n", 3, open_))
    day = p.open_window("clock", b'{"start":"2026-11-01T00:00:00Z","end":"2026-11-02T00:00:00Z"}')
    day.close()
    p.open_window("clock", b'{"start":"2026-11-02T00:00:00Z","end":"2026-11-03T00:00:00Z"}')
    p.stats["t"].in_flight = 2
    after = time.time()

    s = _samples(p)
    p.store.close()
    assert _one(s, "etlstage_build_info", pipeline="demo", version=__version__) == 1
    assert _one(s, "etlstage_stage_queued_messages", pipeline="demo", stage="t") == 3
    assert _one(s, "etlstage_stage_queued_bytes", stage="t") == 9
    assert _one(s, "etlstage_stage_queued_messages", stage="sink") == 0
    assert _one(s, "etlstage_stage_requests_in_flight", stage="t") == 2
    assert _one(s, "etlstage_stage_requests_in_flight", stage="sink") == 0
    assert _one(s, "etlstage_pipeline_windows_in_flight", pipeline="demo") == 2
    assert _one(s, "etlstage_source_windows_in_flight", stage="src", instance="0") == 1
    assert _one(s, "etlstage_source_windows_in_flight", stage="clock", instance="0") == 1
    assert _one(s, "etlstage_source_committed_offset", stage="src", instance="0") == 10
    assert _one(s, "etlstage_source_committed_time_seconds", stage="clock", instance="0") == 1_793_577_600  # 11-02
    for source in (("src", "0"), ("clock", "0")):
        when = _one(s, "etlstage_source_last_commit_time_seconds", stage=source[0], instance=source[1])
        assert before <= when <= after, source
    assert not [n for n, ls in s if n == "etlstage_source_committed_time_seconds" and ("stage", "src") in ls]


def test_the_pipeline_state_gauge_follows_the_run(tmp_path: Path) -> None:
    """running, then draining (stopping gracefully), then failed: one state at 1, the others 0."""
    p = _pipeline(tmp_path)
    try:
        for make, expected in (
            (lambda: None, "running"),
            (lambda: setattr(p, "stopping", True), "draining"),
            (lambda: setattr(p, "failed", True), "failed"),
        ):
            make()
            s = _samples(p)
            states = {dict(ls)["state"]: v for (n, ls), v in s.items() if n == "etlstage_pipeline_state"}
            assert states == {"running": 0, "draining": 0, "failed": 0, expected: 1}, (expected, states)
    finally:
        p.store.close()


def test_each_stage_counts_the_messages_and_bytes_it_took_in_and_gave_out(tmp_path: Path) -> None:
    """count 10 → fanout T (digit d: none when d % 3 == 0, two when 1, one when 2) → L, run in
    this process: every stage's counters, as /metrics shows them, match the messages and
    bytes (markers included) that went through it. T takes in 10 messages of 20 bytes and
    gives out 9 of 24, so an in/out or message/byte mix-up shows."""
    tw = str(FIXTURES / "tw.py")
    text = f"""
name: counts
state_dir: {tmp_path / "state"}
stages:
  - {{name: src, type: E, command: ["{sys.executable}", "{tw}", count, "10"]}}
  - {{name: t, type: T, mode: single, prefetch: 2, command: ["{sys.executable}", "{tw}", fanout]}}
  - {{name: sink, type: L, mode: single, prefetch: 2, command: ["{sys.executable}", "{tw}", append, "{tmp_path / "out.txt"}"]}}
"""
    seen: list[Pipeline] = []

    def keep(p: Pipeline):
        seen.append(p)
        return lambda: None

    config = parse_config(text, base_dir=str(tmp_path))
    assert asyncio.run(run_pipeline(config, once=True, progress=False, attach=keep)) == 0
    assert sorted((tmp_path / "out.txt").read_text().split()) == sorted(
        ["1a", "1b", "2", "4a", "4b", "5", "7a", "7b", "8"]
    )
    s = _samples(seen[0])
    seen[0].store.close()

    def counts(stage: str) -> tuple[float, ...]:
        return tuple(
            _one(s, f"etlstage_stage_{what}_total", stage=stage)
            for what in ("input_messages", "input_bytes", "output_messages", "output_bytes")
        )

    assert counts("src") == (0, 0, 10, 20)  # an E takes nothing in (docs/operating.md)
    assert counts("t") == (10, 20, 9, 24)
    assert counts("sink") == (9, 24, 0, 0)
    # single mode with prefetch 2: the requests written in one go are one at a time, so each
    # message is one answered request, timed
    for stage, requests in (("t", 10), ("sink", 9)):
        assert _one(s, "etlstage_stage_requests_total", stage=stage) == requests
        assert _one(s, "etlstage_stage_request_duration_seconds_count", stage=stage) == requests
        assert 0 < _one(s, "etlstage_stage_request_duration_seconds_sum", stage=stage) < 60
        # each was counted in flight when written and out when answered: none is left
        assert _one(s, "etlstage_stage_requests_in_flight", stage=stage) == 0
