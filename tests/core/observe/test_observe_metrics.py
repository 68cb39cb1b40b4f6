"""`etlstage run --http`: /metrics scraped during a real run, /api/status, and bad addresses."""

from __future__ import annotations

import json
import socket
import textwrap
import time

import pytest

from tests.support.live_run import LiveRun
from tests.support.scrapes import (
    check_bytes_and_requests,
    check_growth,
    check_summary,
    scrape,
    scrape_until_loaded,
    value,
)

N = 30_000
STAGES = """
    name: demo
    stages:
      - {name: src, type: E, mode: cyclic, poll_interval: 0.2, command: ["{PY}", "{TW}", count, "%d", "100"]}
      - {name: shout, type: T, mode: batch, batch_size: 50, command: ["{PY}", "{TW}", counting]}
      - {name: sink, type: L, mode: batch, batch_size: 100, command: ["{PY}", "{TW}", append, out.txt]}
"""


@pytest.mark.slow
def test_metrics_during_a_run_grow_add_up_to_the_summary_and_carry_the_right_labels(pdir):
    pdir.write(STAGES % N)
    with LiveRun(pdir.path) as run:
        scrapes = scrape_until_loaded(run, "sink", N, within=90)
        final, types = scrape(run)
        status_code, ctype, status_body = run.get("/api/status")
        assert run.stop() == 0, run.stderr

    # seen mid-run, not only at the end; counters (and histogram series) never go down
    check_growth([*scrapes, final], types, "sink", N)

    # labels: pipeline and stage on every stage series; instance on workers and sources
    stages = {"src", "shout", "sink"}
    for (name, labels), _ in final.items():
        ls = dict(labels)
        if name.startswith(("etlstage_stage_", "etlstage_worker_", "etlstage_source_", "etlstage_reported_")):
            assert ls.get("pipeline") == "demo" and ls.get("stage") in stages, (name, ls)
        if name.startswith(("etlstage_worker_", "etlstage_source_")):
            assert ls.get("instance") == "0", (name, ls)
        if name.startswith("etlstage_source_"):
            assert ls["stage"] == "src", (name, ls)
        if types[name] == "counter":
            assert name.endswith(("_total", "_created")), name
    assert {dict(ls)["stage"] for n, ls in final if n == "etlstage_stage_input_messages_total"} == stages

    # per-stage figures add up to the end-of-run summary
    summary = run.summary()
    assert set(summary) == stages, run.stderr
    check_summary(final, summary)
    assert summary["src"][1] == summary["sink"][0] == N
    assert "shout: seen 30,000" in run.stderr
    assert value(final, "etlstage_reported_seen", stage="shout") == N
    check_bytes_and_requests(final, stages, "src", "sink", N)
    opened = value(final, "etlstage_source_windows_opened_total", stage="src")
    committed = value(final, "etlstage_source_windows_committed_total", stage="src")
    in_flight = value(final, "etlstage_source_windows_in_flight", stage="src")
    assert opened >= N / 100 and committed == opened - in_flight
    assert value(final, "etlstage_source_committed_messages_total", stage="src") == N
    assert value(final, "etlstage_worker_resident_memory_bytes", stage="shout") > 1e6
    assert value(final, "etlstage_stage_restarts_total", stage="shout") == 0
    assert value(final, "etlstage_deadletters", status="any") == 0
    assert "process_cpu_seconds_total" in {n for n, _ in final}  # the supervisor's own

    # /api/status: the status document with the live state and rates
    assert status_code == 200 and ctype.startswith("application/json")
    doc = json.loads(status_body)
    (live,) = doc["running"]
    assert live["state"] == "running" and live["progress"]["pipeline"] == "demo"
    assert set(live["progress"]["stages"]) == stages
    for st in live["progress"]["stages"].values():
        assert {"rate", "history", "latency", "reports", "workers"} <= set(st)
    assert live["progress"]["stages"]["shout"]["reports"]["seen"] == N
    assert doc["checkpoints"][0]["source"] == "src" and doc["checkpoints"][0]["messages"] == N


def test_page_files_unknown_paths_and_methods(pdir):
    pdir.write(STAGES % 1000)
    with LiveRun(pdir.path) as run:
        code, ctype, body = run.get("/")
        assert code == 200 and ctype.startswith("text/html")
        assert '<script src="static/app.js">' in body and "{{STATE}}" not in body
        state = body.split('<script id="initial-state" type="application/json">', 1)[1].split("</script>", 1)[0]
        assert json.loads(state.replace("<\\/", "</"))["running"][0]["progress"]["pipeline"] == "demo"
        assert run.get("/static/app.js")[:2] == (200, "text/javascript; charset=utf-8")
        assert run.get("/static/style.css")[0] == 200
        assert run.get("/static/../server.py")[0] == 404
        assert run.get("/nope")[0] == 404
        host, port = run.url.removeprefix("http://").rstrip("/").split(":")
        with socket.create_connection((host, int(port)), timeout=10) as sock:
            sock.sendall(b"POST /metrics HTTP/1.0\r\nContent-Length: 0\r\n\r\n")
            assert sock.recv(100).startswith(b"HTTP/1.0 405")
        assert run.stop() == 0


@pytest.mark.parametrize(
    ("value", "shown"),
    [("9999999", "port 9999999"), ("host", "'host' is not an address"), ("::1:80", "'::1:80' is not an address")],
)
def test_a_bad_http_option_is_a_usage_error_naming_it(pdir, value, shown):
    pdir.write(STAGES % 10)
    r = pdir.etlstage("run", "stages.yaml", "--once", "--http", value)
    assert r.code == 2, r
    assert f"--http: {shown}" in r.stderr and "Traceback" not in r.stderr
    assert not (pdir.path / "out.txt").exists()


def test_a_bad_http_key_names_its_line(pdir):
    pdir.write("http: [1, 2]\n" + textwrap.dedent(STAGES % 10))
    r = pdir.etlstage("run", "stages.yaml", "--once")
    assert r.code == 2 and "stages.yaml:1: http:" in r.stderr, r
    pdir.write("http: 'localhost:http'\n" + textwrap.dedent(STAGES % 10))
    r = pdir.etlstage("validate", "stages.yaml")
    assert r.code == 2 and "stages.yaml:1: http: 'localhost:http' is not an address" in r.stderr, r


def test_a_port_in_use_is_a_clear_error_and_nothing_runs(pdir):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        pdir.write(f"http: 127.0.0.1:{port}\n" + textwrap.dedent(STAGES % 10))
        r = pdir.etlstage("run", "stages.yaml", "--once")
    assert r.code == 2, r
    assert f"cannot listen on http://127.0.0.1:{port}/" in r.stderr and "Traceback" not in r.stderr
    assert not (pdir.path / "out.txt").exists()


@pytest.mark.slow
def test_failures_restarts_and_dead_letters_show_in_metrics_and_the_status_document(pdir):
    pdir.write("""
        name: demo
        stages:
          - {name: src, type: E, mode: cyclic, poll_interval: 0.2, command: ["{PY}", "{TW}", count, "2000", "100"]}
          - {name: picky, type: T, mode: batch, batch_size: 50, on_failure: deadletter,
             restart: {max_restarts: 1, backoff: 0.05}, command: ["{PY}", "{TW}", poison, "77"]}
          - {name: sink, type: L, mode: batch, batch_size: 100, command: ["{PY}", "{TW}", append, out.txt]}
    """)
    with LiveRun(pdir.path) as run:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            samples, _ = scrape(run)
            # messages a restarted worker had answered may be sent again: count what was loaded
            if len(set(pdir.lines("out.txt"))) == 1999 and value(samples, "etlstage_deadletters", status="new"):
                break
            time.sleep(0.2)
        else:
            pytest.fail("the run did not load the other messages in time:\n" + run.stderr)
        doc = json.loads(run.get("/api/status")[2])
        assert run.stop() == 0, run.stderr
    restarts = value(samples, "etlstage_stage_restarts_total", stage="picky")
    assert restarts >= 2
    assert value(samples, "etlstage_stage_worker_failures_total", stage="picky", reason="exit") == restarts
    assert value(samples, "etlstage_stage_worker_failures_total", stage="picky", reason="timeout") == 0
    assert value(samples, "etlstage_stage_deadletter_messages_total", stage="picky") == 1
    assert value(samples, "etlstage_deadletters", status="new") == 1
    assert value(samples, "etlstage_stage_restarts_total", stage="sink") == 0
    picky = doc["running"][0]["progress"]["stages"]["picky"]
    assert picky["failures"] == {"exit": restarts} and picky["deadletters"] == 1
    assert picky["last_errors"] and "picky" in picky["last_errors"][-1]["error"]
    assert doc["deadletters"] == {"total": 1, "new": 1}
