"""docs/monitoring: the shipped alert rules and Grafana dashboard use only metrics etlstage exports.

`promtool check rules` checks the rules' syntax; the names in every PromQL expression are
compared with what a real run serves on /metrics and leaves in --metrics-file; and a real
Prometheus scrapes a real run and evaluates every expression (slow).
"""

from __future__ import annotations

import datetime as dt
import http.server
import json
import re
import shutil
import socket
import subprocess
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from tests.support.live_run import LiveRun
from tests.support.paths import ROOT
from tests.support.waiting import wait_for

MONITORING = ROOT / "docs" / "monitoring"
RULES = MONITORING / "etlstage-alerts.yml"
DASHBOARD = MONITORING / "etlstage-dashboard.json"
# Grafana's variables, as a dashboard user's defaults would set them
VARIABLES = {"$__rate_interval": "1m", "$__range": "5m", "$pipeline": ".*"}
# PromQL words that are not metric names
PROMQL = {
    "sum", "rate", "increase", "histogram_quantile", "time", "and", "or", "unless",
    "by", "on", "without", "ignoring", "group_left", "group_right", "bool", "absent", "changes",
}  # fmt: skip
# series Prometheus makes itself for every target it scrapes
PROMETHEUS_OWN = {"up"}
RULE_TESTS = MONITORING / "etlstage-alerts.test.yml"


def rule_exprs() -> dict[str, str]:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return {r["alert"]: r["expr"] for g in groups for r in g["rules"]}


def dashboard_exprs() -> dict[str, str]:
    dash = json.loads(DASHBOARD.read_text())
    found = {f"{p['title']} {t['refId']}": t["expr"] for p in dash["panels"] for t in p["targets"]}
    for v in dash["templating"]["list"]:
        if v["type"] == "query":  # label_values(metric, label): Grafana's, the metric must exist
            metric = re.fullmatch(r"label_values\((\w+), *\w+\)", v["definition"])
            assert metric, v["definition"]
            found[f"variable {v['name']}"] = metric[1]
    return found


def with_variables(expr: str) -> str:
    for name, value in VARIABLES.items():
        expr = expr.replace(name, value)
    return expr


def metric_names(expr: str) -> set[str]:
    """The metric names an expression selects: what is left without strings, label
    matchers, ranges, grouping clauses, numbers and PromQL's own words."""
    expr = re.sub(r'"[^"]*"', "", with_variables(expr))
    expr = re.sub(r"\{[^}]*\}|\[[^\]]*\]", "", expr)
    expr = re.sub(r"\b(by|on|without|ignoring|group_left|group_right)\s*\([^)]*\)", "", expr)
    words = set(re.findall(r"\b[a-zA-Z_:][a-zA-Z0-9_:]*\b", expr))
    return words - PROMQL - PROMETHEUS_OWN


def test_promtool_checks_the_alert_rules():
    promtool = shutil.which("promtool")
    assert promtool, "promtool is missing: apt-get install prometheus (as .ci/run does)"
    r = subprocess.run([promtool, "check", "rules", str(RULES)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"SUCCESS: {len(rule_exprs())} rules found" in r.stdout
    # the alerts the operator needs: no progress, restarts, dead letters, lag, a failed run
    assert {"EtlstageStageNoProgress", "EtlstageWorkerRestarts", "EtlstageDeadLetters", "EtlstageLag"} <= set(
        rule_exprs()
    )
    assert "EtlstageRunFailed" in rule_exprs()


def test_the_dead_pipeline_alerts_fire_in_promtools_rule_unit_tests():
    """A SIGKILLed supervisor (its target down), a target gone from discovery (absent) and a
    run that stopped committing each fire their alert, and a healthy run none
    (docs/monitoring/etlstage-alerts.test.yml)."""
    promtool = shutil.which("promtool")
    assert promtool, "promtool is missing: apt-get install prometheus (as .ci/run does)"
    assert {"EtlstageTargetDown", "EtlstageTargetMissing", "EtlstagePipelineStalled"} <= set(rule_exprs())
    tested = yaml.safe_load(RULE_TESTS.read_text())
    fired = {a["alertname"] for t in tested["tests"] for a in t["alert_rule_test"] if a["exp_alerts"]}
    assert {"EtlstageTargetDown", "EtlstageTargetMissing", "EtlstagePipelineStalled"} <= fired
    r = subprocess.run([promtool, "test", "rules", str(RULE_TESTS)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "SUCCESS" in r.stdout


def test_the_name_check_sees_every_name_in_an_expression():
    assert metric_names(
        'histogram_quantile(0.95, sum by (stage, le) (rate(a_bucket{pipeline=~"$pipeline"}[$__rate_interval])))'
        " and on (pipeline) time() - b > 3"
    ) == {"a_bucket", "b"}


# Two sources, one per offset policy (counter and time), so that every conditional figure is there.
STAGES = """
    name: watched
    stages:
      - name: numbers
        type: E
        mode: cyclic
        poll_interval: 0.2
        offsets: supervisor
        offset_policy: {type: counter, start: 0, step: 50}
        command: ["{PY}", "{TW}", count, "100000000"]
      - name: clock
        type: E
        mode: cyclic
        poll_interval: 0.2
        offsets: supervisor
        offset_policy: {type: time, start: "START", step: PT1H, lag: PT0S}
        command: ["{PY}", echo.py]
      - {name: shout, type: T, mode: batch, batch_size: 20, command: ["{PY}", "{TW}", upper]}
      - {name: sink, type: L, mode: batch, batch_size: 50, command: ["{PY}", "{TW}", append, out.txt]}
"""
ECHO = """import sys
for line in iter(sys.stdin.buffer.readline, b""):
    sys.stdout.buffer.write(line + b"\\x00")
    sys.stdout.flush()
"""
# names that appear once the run has committed windows of both sources and answered requests
WAIT_FOR = ("etlstage_source_committed_time_seconds", "etlstage_source_committed_offset")


def start_watched(pdir) -> None:
    start = (dt.datetime.now(dt.UTC) - dt.timedelta(hours=6)).strftime("%Y-%m-%dT%H:00:00Z")
    pdir.write(STAGES.replace("START", start))
    (pdir.path / "echo.py").write_text(ECHO)


def names_in(text: str) -> set[str]:
    return {s.name for fam in text_string_to_metric_families(text) for s in fam.samples}


def test_every_metric_the_rules_and_the_dashboard_use_is_exported(pdir):
    start_watched(pdir)
    out = pdir.path / "watched.prom"
    with LiveRun(pdir.path, "--metrics-file", str(out)) as run:

        def scraped() -> str | None:
            text = run.get("/metrics")[2]
            return text if all(n in text for n in WAIT_FOR) else None

        served = wait_for(scraped, 30, "both sources' committed offsets on /metrics")
        assert run.stop() == 0, run.stderr
    exported = names_in(served) | names_in(out.read_text())
    used = {where: metric_names(e) for where, e in {**rule_exprs(), **dashboard_exprs()}.items()}
    missing = {where: sorted(names - exported) for where, names in used.items() if names - exported}
    assert not missing, f"names no run exports: {missing}"
    # every expression selects something: the parsing above found it (or Prometheus's own `up`)
    exprs = {**rule_exprs(), **dashboard_exprs()}
    assert all(names or PROMETHEUS_OWN & set(re.findall(r"\w+", exprs[where])) for where, names in used.items())


# --- a real Prometheus ---------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def serve_file(path: Path) -> tuple[http.server.HTTPServer, str]:
    """The metrics file over HTTP, as node-exporter's textfile collector would expose it."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = path.read_bytes() if path.exists() else b""
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"127.0.0.1:{server.server_address[1]}"


class Prometheus:
    def __init__(self, workdir: Path, targets: dict[str, str]) -> None:
        port = free_port()
        self.url = f"http://127.0.0.1:{port}"
        config = {
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "rule_files": [str(RULES)],
            "scrape_configs": [
                {"job_name": job, "metrics_path": "/metrics", "static_configs": [{"targets": [target]}]}
                for job, target in targets.items()
            ],
        }
        (workdir / "prometheus.yml").write_text(yaml.safe_dump(config))
        self.proc = subprocess.Popen(
            [
                "prometheus",
                f"--config.file={workdir / 'prometheus.yml'}",
                f"--storage.tsdb.path={workdir / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{port}",
            ],
            stdout=subprocess.DEVNULL,
            stderr=(workdir / "prometheus.log").open("wb"),
        )
        wait_for(self.ready, 60, "Prometheus to be ready", every=0.2)

    def ready(self) -> bool:
        try:
            with urllib.request.urlopen(self.url + "/-/ready", timeout=2) as r:
                return r.status == 200
        except OSError:
            return False

    def api(self, path: str, **params: str) -> dict:
        url = f"{self.url}/api/v1/{path}?{urllib.parse.urlencode(params)}"
        with urllib.request.urlopen(url, timeout=10) as r:
            doc = json.loads(r.read())
        assert doc["status"] == "success", doc
        return doc["data"]

    def query(self, expr: str, at: float) -> list[dict]:
        return self.api("query", query=expr, time=f"{at:.3f}")["result"]

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=30)


@pytest.fixture
def prometheus_for(tmp_path: Path) -> Iterator:
    started: list[Prometheus] = []

    def start(targets: dict[str, str]) -> Prometheus:
        started.append(Prometheus(tmp_path, targets))
        return started[-1]

    yield start
    for p in started:
        p.stop()


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_a_real_prometheus_evaluates_every_expression_over_a_real_run(pdir, prometheus_for):
    if shutil.which("prometheus") is None:
        pytest.fail("prometheus is missing: apt-get install prometheus (as .ci/run does)")
    start_watched(pdir)
    out = pdir.path / "watched.prom"
    files, files_at = serve_file(out)
    try:
        with LiveRun(pdir.path, "--metrics-file", str(out)) as run:
            prom = prometheus_for({"etlstage": run.url.split("/")[2], "etlstage-textfile": files_at})
            watched_from = time.time()
            # running: enough scrapes for rates, both sources committed, requests answered
            wait_for(
                lambda: all(prom.query(f"count_over_time({n}[1m]) > 8", time.time()) for n in WAIT_FOR),
                90,
                "Prometheus to scrape the running pipeline",
                every=0.5,
            )
            running_at = time.time()
            assert run.stop() == 0, run.stderr
        wait_for(lambda: prom.query("etlstage_run_exit_code", time.time()), 30, "the exit status from the file")
        ended_at = time.time()
    finally:
        files.shutdown()
        files.server_close()

    empty = []
    for where, expr in dashboard_exprs().items():
        expr = with_variables(expr)
        # a figure of the running pipeline, or of its end (the metrics file)
        if not (prom.query(expr, running_at) or prom.query(expr, ended_at)):
            empty.append(f"{where}: {expr}")
    assert not empty, "dashboard expressions with no result:\n" + "\n".join(empty)

    # the rules: loaded, evaluated without error; none fires for this healthy run
    rules = [r for g in prom.api("rules")["groups"] for r in g["rules"]]
    assert {r["name"] for r in rules} == set(rule_exprs())
    wait_for(lambda: all(r.get("lastEvaluation", "").startswith("2") for r in rules), 10, "rule evaluations")
    assert all(r["health"] == "ok" for r in prom.api("rules")["groups"][0]["rules"]), rules
    assert not [a for a in prom.api("alerts")["alerts"] if a["state"] == "firing"]
    # No test waits out a rule's `for:`, so what shows a rule wrong for a healthy run is how
    # often it was pending while the run went on.  A stage can answer nothing for two scrapes
    # on a busy machine (pending, by the rule's design, for a moment); a rule true in the
    # steady state is pending at nearly every evaluation.  (The metrics file is a snapshot
    # rewritten every few seconds, so it is left out: two scrapes of one snapshot look like
    # a stage answering nothing.)
    window = f"{max(5, int(running_at - watched_from))}s"
    scrapes = prom.query(
        f'count_over_time(etlstage_pipeline_windows_in_flight{{job="etlstage"}}[{window}])', running_at
    )
    assert scrapes and float(scrapes[0]["value"][1]) >= 8, scrapes
    pending = prom.query(f'max by (alertname) (count_over_time(ALERTS{{job="etlstage"}}[{window}]))', running_at)
    often = {p["metric"]["alertname"]: float(p["value"][1]) for p in pending}
    assert all(n <= float(scrapes[0]["value"][1]) / 2 for n in often.values()), (often, scrapes)
    # and each alert expression's selectors find the run's series (not a typo matching nothing)
    for alert, expr in rule_exprs().items():
        for name in metric_names(expr):
            assert prom.query(name, running_at) or prom.query(name, ended_at), (alert, name)
