"""`etlstage run --engine spark --http`: the driver serves /metrics, /api/status and the page.

Real runs of the CLI on local[2] (a JVM each), scraped while they run; the page is loaded
by headless Chromium.  The same endpoints and parsers as the supervisor engine's tests.
"""

from __future__ import annotations

import json
import time

import pytest

from tests.conftest import PY, TW
from tests.core.observe.test_observe_page import browse, count, figures, stage_figures
from tests.support.live_run import LiveRun, restarts_in_summary
from tests.support.paths import FIXTURES
from tests.support.scrapes import (
    check_bytes_and_requests,
    check_growth,
    check_summary,
    scrape,
    scrape_until_loaded,
    value,
)
from tests.support.waiting import wait_for

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]
SPARK = ("--engine", "spark", "--master", "local[2]")
N = 6_000
# a cyclic extractor (one micro-batch per cycle of 300), a counting T, a T that crashes once
# (its 3rd answer, across restarts), and a loader; no --once: the extractor keeps polling
STAGES = f"""
name: demo
stages:
  - {{name: src, type: E, mode: cyclic, poll_interval: 0.2, command: ["{PY}", "{TW}", count, "{N}", "300"]}}
  - {{name: shout, type: T, mode: batch, batch_size: 50, command: ["{PY}", "{TW}", counting]}}
  - {{name: flaky, type: T, mode: batch, batch_size: 50,
     restart: {{backoff: 0.1}}, command: ["{PY}", "{FIXTURES / "misbehave.py"}", flags, crash@3]}}
  - {{name: sink, type: L, mode: batch, batch_size: 100, command: ["{PY}", "{TW}", append, out.txt]}}
"""


def test_metrics_under_spark_grow_add_up_to_the_summary_and_count_the_restart(tmp_path):
    (tmp_path / "flags").mkdir()
    (tmp_path / "stages.yaml").write_text(STAGES)
    with LiveRun(tmp_path, *SPARK, timeout=60) as run:
        scrapes = scrape_until_loaded(run, "sink", N, within=150, every=0.3)
        final, types = scrape(run)  # no micro-batch while the extractor's cycles come back empty
        status_code, ctype, status_body = run.get("/api/status")
        assert run.stop() == 0, run.stderr

    loaded = (tmp_path / "out.txt").read_bytes()
    assert sorted(int(x) for x in loaded.split()) == list(range(N))
    check_growth([*scrapes, final], types, "sink", N)
    # figures from outside the engine's counters: what the loader itself wrote (a line per message)
    assert value(final, "etlstage_stage_input_messages_total", stage="sink") == loaded.count(b"\n")
    assert value(final, "etlstage_stage_input_bytes_total", stage="sink") == len(loaded)

    stages = {"src", "shout", "flaky", "sink"}
    for (name, labels), _ in final.items():
        ls = dict(labels)
        if name.startswith(("etlstage_stage_", "etlstage_source_", "etlstage_reported_")):
            assert ls.get("pipeline") == "demo" and ls.get("stage") in stages, (name, ls)
        if name.startswith("etlstage_source_"):
            assert ls["stage"] == "src" and ls["instance"] == "0", (name, ls)
    assert not [n for n, _ in final if n.startswith("etlstage_worker_")]  # executors' resources: not ours

    # per-stage figures = the end-of-run summary; the crash is one restart, in both
    summary = run.summary()
    assert set(summary) == stages, run.stderr
    check_summary(final, summary)
    assert summary["src"][1] == summary["sink"][0] == N
    assert restarts_in_summary(run.stderr) == {"src": 0, "shout": 0, "flaky": 1, "sink": 0}, run.stderr
    assert value(final, "etlstage_stage_restarts_total", stage="flaky") == 1
    assert value(final, "etlstage_stage_worker_failures_total", stage="flaky", reason="exit") == 1
    assert value(final, "etlstage_stage_restarts_total", stage="shout") == 0
    check_bytes_and_requests(final, stages, "src", "sink", N)
    assert value(final, "etlstage_stage_requests_total", stage="src") >= N / 300  # cycles
    assert value(final, "etlstage_reported_seen", stage="shout") == N
    opened = value(final, "etlstage_source_windows_opened_total", stage="src")
    committed = value(final, "etlstage_source_windows_committed_total", stage="src")
    assert committed == N / 300 and opened - committed == value(final, "etlstage_source_windows_in_flight", stage="src")
    assert value(final, "etlstage_source_committed_messages_total", stage="src") == N
    assert value(final, "etlstage_deadletters", status="any") == 0
    assert "process_cpu_seconds_total" in {n for n, _ in final}  # the driver's own

    assert status_code == 200 and ctype.startswith("application/json")
    doc = json.loads(status_body)
    (live,) = doc["running"]
    assert live["state"] == "running" and live["progress"]["pipeline"] == "demo"
    assert live["progress"]["engine"] == "spark" and set(live["progress"]["stages"]) == stages
    flaky = live["progress"]["stages"]["flaky"]
    assert flaky["restarts"] == 1 and "exited" in flaky["last_errors"][0]["error"], flaky["last_errors"]
    assert doc["checkpoints"][0]["source"] == "src" and doc["checkpoints"][0]["windows_done"] == N / 300


def test_the_page_under_spark_shows_every_stage_and_live_figures_in_a_real_browser(tmp_path):
    (tmp_path / "flags").mkdir()
    slow = STAGES.replace(f'"{N}", "300"', '"100000000", "200"')  # keeps extracting while we look
    (tmp_path / "stages.yaml").write_text(slow)
    with LiveRun(tmp_path, *SPARK, timeout=60) as run:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:  # the first micro-batches: the JVM's Python workers started
            if value(scrape(run)[0], "etlstage_stage_input_messages_total", stage="sink") > 0:
                break
            time.sleep(0.5)
        wait_for(lambda: stage_figures(run)["shout"]["rate"] > 0, 60, "two rate samples: a rate and a chart")
        first = figures(browse(run.url, tmp_path / "profile", "--dump-dom"))
        wait_for(lambda: stage_figures(run)["sink"]["in"] > count(first.stages["sink"]["in"]), 60, "more loaded")
        second = figures(browse(run.url, tmp_path / "profile", "--dump-dom"))
        shot = tmp_path / "status-page-spark.png"
        browse(run.url, tmp_path / "profile", f"--screenshot={shot}", "--window-size=1280,900")
        assert run.stop() == 0, run.stderr

    for page in (first, second):
        assert set(page.stages) == {"src", "shout", "flaky", "sink"}
        assert page.page["state"].endswith("running")
    assert count(second.stages["src"]["out"]) > count(first.stages["src"]["out"]) > 0
    assert count(second.stages["sink"]["in"]) > count(first.stages["sink"]["in"]) > 0
    # the loader's own count, from outside the engine's counters: at least what the page showed
    assert len((tmp_path / "out.txt").read_text().split()) >= count(second.stages["sink"]["in"])
    assert count(first.stages["shout"]["rate"].split()[0]) > 0
    assert first.page["elapsed"] != second.page["elapsed"]
    assert "seen:" in first.stages["shout"]["reports"]
    assert count(first.stages["flaky"]["restarts"].split()[0]) == 1
    assert first.page["state"].startswith("pid ")
    # what the driver cannot know of workers on executors is left out, not shown as 0
    assert not {"rss", "cpu", "workers", "queued", "in_flight"} & set(first.stages["shout"])
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000


def test_a_port_in_use_stops_a_spark_run_before_spark_starts(tmp_path):
    import socket

    from tests.support.run_cli import etlstage

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        (tmp_path / "flags").mkdir()
        (tmp_path / "stages.yaml").write_text(STAGES)
        r = etlstage(tmp_path, "run", "stages.yaml", "--once", "--http", f"127.0.0.1:{port}", *SPARK, timeout=60)
    assert r.code == 2, r
    assert f"cannot listen on http://127.0.0.1:{port}/" in r.stderr and "Traceback" not in r.stderr
    assert "Spark: using" not in r.stderr and not (tmp_path / "out.txt").exists()
