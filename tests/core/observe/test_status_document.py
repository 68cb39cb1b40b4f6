"""One status document, declared in ``observe/document.py`` and filled by both engines.

Each engine's ``/api/status`` and ``etlstage status --json`` of a live run carry every
declared field except the engine's documented absences (``ABSENT``) and nothing
undeclared; what an engine cannot know is absent from ``/metrics`` too, not 0.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from etlstage.observe.document import ABSENT, StageDoc, StatusDoc
from etlstage.observe.live import Snapshot
from etlstage.observe.metrics import PipelineCollector
from etlstage.observe.status import render
from tests.conftest import PY, TW
from tests.support.live_run import LiveRun
from tests.support.paths import FIXTURES
from tests.support.run_cli import etlstage
from tests.support.scrapes import scrape
from tests.support.statusdoc import compare
from tests.support.waiting import wait_for

# the sink reports numbers JSON has no word for (Python's json reads them): dropped, with a warning
NAN_REPORT = (
    'printf \'%s\' \'{"ok": 1, "nan": NaN, "inf": -Infinity, "big": 1e400}\' '
    '> "$ETLSTAGE_STATE_DIR/report-$$$$.json"; exec "$0" "$@"'
)
# keeps extracting while we look; a T that crashes once (its 3rd answer): a last error to show
STAGES = f"""
name: demo
ENGINE
stages:
  - {{name: src, type: E, mode: cyclic, poll_interval: 0.2, command: ["{PY}", "{TW}", count, "100000000", "200"]}}
  - {{name: flaky, type: T, mode: batch, batch_size: 50,
     restart: {{backoff: 0.1}}, command: ["{PY}", "{FIXTURES / "misbehave.py"}", flags, crash@3]}}
  - {{name: sink, type: L, mode: batch, batch_size: 100, command: [sh, -c, {json.dumps(NAN_REPORT)}, "{PY}", "{TW}", append, out.txt]}}
"""
UNKNOWN_TO_SPARK = (
    "etlstage_stage_requests_in_flight",
    "etlstage_stage_queued_messages",
    "etlstage_stage_queued_bytes",
)


def _stage(**absent_or_not: Any) -> StageDoc:
    st: dict[str, Any] = {
        "type": "T",
        **dict.fromkeys(("in", "out", "bytes_in", "bytes_out", "jobs", "restarts", "deadletters"), 3),
        "failures": {},
        "last_errors": [],
        "latency": {"buckets": [("+Inf", 3)], "sum": 0.5},
        "reports": {},
        "rate": 1.0,
        "history": [],
    }
    st.update(absent_or_not)
    return st  # type: ignore[return-value]


def _live(st: StageDoc) -> Any:
    return {"pipeline": "p", "time": 100.0, "elapsed": 1.0, "windows_in_flight": 0, "stages": {"t": st}, "sources": []}


def _metric_names(st: StageDoc) -> set[str]:
    registry = CollectorRegistry(auto_describe=False)
    status: Any = {"checkpoints": [], "deadletters": {"total": 0, "new": 0}}
    registry.register(PipelineCollector(lambda: Snapshot(_live(st), status)))
    return {line.split("{")[0] for line in generate_latest(registry).decode().splitlines() if line[:1] != "#"}


def test_metrics_leave_out_what_the_engine_does_not_know_and_publish_what_it_does():
    unknown = _metric_names(_stage())
    assert not [n for n in unknown if n.startswith(UNKNOWN_TO_SPARK)], unknown
    assert "etlstage_stage_requests_total" in unknown
    known = _metric_names(_stage(in_flight=0, queued={"messages": 0, "bytes": 0}))
    assert set(UNKNOWN_TO_SPARK) <= known  # zero when known to be zero


def test_the_status_text_shows_an_unknown_figure_as_a_dash_not_zero():
    doc: Any = {
        "time": 100.0,
        "running": [
            {"pid": 7, "started_at": 99.0, "heartbeat": 100.0, "state": "running", "progress": _live(_stage())}
        ],
        "dead": [],
        "checkpoints": [
            {"source": "e", "windows_done": 2, "messages": None, "committed_end": None, "updated_at": 99.0}
        ],
        "windows_in_flight": [],
        "deadletters": {"total": 0, "new": 0},
    }
    lines = render(doc, "state")
    (row,) = [line for line in lines if line.strip().startswith("t ")]
    assert row.split()[4:6] == ["-", "3"] and row.rstrip().endswith("-"), row  # in flight; restarts; memory
    assert "messages          -" in next(line for line in lines if "windows done" in line)


def _full(doc: dict[str, Any]) -> bool:
    """A document whose lists hold a record each, so that every declared field can be looked for."""
    runs = [r for r in doc["running"] if r["progress"]]
    return bool(
        runs
        and doc["checkpoints"]
        and doc["windows_in_flight"]
        and runs[0]["progress"]["windows"]
        and runs[0]["progress"]["sources"]
        and runs[0]["progress"]["stages"]["flaky"]["last_errors"]
        and runs[0]["progress"]["stages"]["sink"]["reports"].get("ok")
        and (runs[0]["progress"]["engine"] == "spark" or runs[0]["progress"]["stages"]["flaky"].get("workers"))
    )


def _served(run: LiveRun) -> dict[str, Any] | None:
    code, ctype, body = run.get("/api/status")
    assert code == 200 and ctype.startswith("application/json"), (code, ctype)
    doc: dict[str, Any] = strict_json(body)
    return _full_or_none(doc)


def _full_or_none(doc: dict[str, Any]) -> dict[str, Any] | None:
    return doc if _full(doc) else None


def _printed(folder: Any) -> dict[str, Any]:
    out = etlstage(folder, "status", "--json")
    assert out.code == 0, out.stderr
    doc: dict[str, Any] = strict_json(out.stdout)
    return doc


def strict_json(text: str) -> Any:
    """``text`` read as JSON proper: NaN, Infinity and -Infinity are refused."""

    def refuse(word: str) -> Any:
        raise ValueError(f"not JSON: {word}")

    return json.loads(text, parse_constant=refuse)


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_the_supervisor_fills_every_field_and_status_json_has_the_shape_of_api_status(pdir):
    (pdir.path / "flags").mkdir()
    (pdir.path / "stages.yaml").write_text(STAGES.replace("ENGINE", ""))
    with LiveRun(pdir.path) as run:
        served = wait_for(lambda: _served(run), 60, "a window in flight, a checkpoint and a worker's crash")
        printed = wait_for(lambda: _full_or_none(_printed(pdir.path)), 30, "a heartbeat with all that")
        samples, _ = scrape(run)
        assert run.stop() == 0, run.stderr
    for doc in (served, printed):
        assert doc["engine"] == "supervisor"
        assert compare(doc, StatusDoc) == (set(ABSENT["supervisor"]), set())
    names = {n for n, _ in samples}
    assert set(UNKNOWN_TO_SPARK) <= names


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_the_spark_engine_fills_the_same_fields_less_its_documented_absences(tmp_path):
    (tmp_path / "flags").mkdir()
    (tmp_path / "stages.yaml").write_text(STAGES.replace("ENGINE", "engine: {kind: spark, master: 'local[2]'}"))
    with LiveRun(tmp_path, timeout=60) as run:
        served = wait_for(lambda: _served(run), 150, "a micro-batch in flight, one committed and a worker's crash")
        samples, _ = scrape(run)
        printed = _printed(tmp_path)
        assert run.stop() == 0, run.stderr
    assert served["engine"] == printed["engine"] == "spark"
    assert compare(served, StatusDoc) == (set(ABSENT["spark"]), set())
    # from outside the driver: the checkpoint and the state store, no run (the driver serves its own)
    assert printed["running"] == [] and printed["checkpoints"] and printed["checkpoints"][0]["messages"] is None
    outside = {p for p in ABSENT["spark"] if not p.startswith("running.")}
    assert compare(printed, StatusDoc) == (outside, set())
    # requests in flight and queues are the executors': not published as 0
    names = {n for n, _ in samples}
    assert "etlstage_stage_requests_total" in names
    assert not [n for n in names if n.startswith(UNKNOWN_TO_SPARK)], sorted(names)


def test_the_one_encoding_writes_a_non_finite_number_as_null_never_bare_nan():
    from etlstage.observe.document import encode

    doc: Any = {"rate": float("nan"), "stages": [{"cpu": float("inf")}, {"cpu": -float("inf")}], "n": 1.5}
    for indent in (None, 2):
        assert strict_json(encode(doc, indent)) == {"rate": None, "stages": [{"cpu": None}, {"cpu": None}], "n": 1.5}
