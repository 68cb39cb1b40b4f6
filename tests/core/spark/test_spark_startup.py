"""The Spark engine's start-up is no black box: each phase (JVM start, session, pre-flight
job, query start, first micro-batch) is logged with its duration, shown on the status page
and in the progress line, and counted in the summary; the page's elapsed never goes back."""

from __future__ import annotations

import re
import time
from types import SimpleNamespace

import pytest

from etlstage.config.loader import load_config
from etlstage.observe.live import Snapshot
from etlstage.observe.server import ObserveServer, Snapshots
from etlstage.spark.driver.live import documents
from etlstage.spark.driver.report import Counts
from etlstage.spark.tasks.tally import Tally, tally_dir, write
from tests.core.observe.test_observe_page import browse, figures
from tests.support.run_cli import etlstage
from tests.support.waiting import wait_for

STAGES = """
name: started
engine: {kind: spark, master: "local[1]"}
stages:
  - {name: src, type: E, mode: plain, command: ["{PY}", "{TW}", count, "20"]}
  - {name: up, type: T, mode: batch, batch_size: 5, instances: 2, command: ["{PY}", "{TW}", upper]}
  - {name: sink, type: L, mode: batch, batch_size: 10, command: ["{PY}", "{TW}", append, out.txt]}
"""
PHASES = ["JVM start", "session", "pre-flight job", "data sources", "query start", "first micro-batch"]


def _counts(pdir, run_id: str = "") -> Counts:
    pdir.write(STAGES)
    return Counts(load_config(pdir.path / "stages.yaml"), run_id)


def _progress(batch: int, trigger_ms: int) -> SimpleNamespace:
    """What Spark's listener hands over for a committed micro-batch (the fields Counts reads)."""
    return SimpleNamespace(
        batchId=batch, observedMetrics={}, durationMs={"triggerExecution": trigger_ms}, numInputRows=0
    )


def test_elapsed_counts_from_the_run_start_and_never_goes_back_when_the_query_starts(pdir):
    counts = _counts(pdir)
    take = documents(counts)
    counts.phase("JVM start")
    counts.phase("session")
    # the JVM and the session take a while before the query starts
    before = wait_for(lambda: next((d for d in [take()[0]] if d["elapsed"] >= 0.2), None), 10, "0.2 s of start-up")
    counts.begin()  # the query starts: the summary's rates count from here, the page's elapsed does not
    after = take()[0]
    assert after["elapsed"] >= before["elapsed"] >= 0.2
    assert abs(after["started_at"] - before["started_at"]) < 0.1  # one clock: the run's start does not move
    assert [(p["name"], p["done"]) for p in after["startup"]] == [("JVM start", True), ("session", False)]


def test_each_phase_is_logged_shown_and_summed_and_the_first_batch_ends_start_up(pdir, caplog):
    counts = _counts(pdir)
    caplog.set_level("INFO", logger="etlstage.progress")
    for name in PHASES:
        counts.phase(name)
    assert counts.startup().endswith("…")  # the first micro-batch is still running
    counts.progress(_progress(0, 1500))
    live = documents(counts)()[0]
    assert [p["name"] for p in live["startup"]] == PHASES and all(p["done"] for p in live["startup"])
    logged = [r.getMessage() for r in caplog.records if r.getMessage().startswith("start-up:")]
    assert [m.split(" took ")[0] for m in logged] == [f"start-up: {p}" for p in PHASES], logged
    summary = counts.summary()
    assert re.search(r"^start-up: JVM start [\d.]+s, session [\d.]+s, .*first micro-batch [\d.]+s$", summary, re.M)
    assert "the run took" in summary and "start-up included" in summary
    # the micro-batch is one observation of extracted -> committed: its trigger's 1.5 s
    (src,) = live["sources"]
    assert src["commit_latency"]["sum"] == 1.5
    assert dict(src["commit_latency"]["buckets"])["2.5"] == 1 and dict(src["commit_latency"]["buckets"])["1.0"] == 0


def test_the_progress_line_names_the_phase_under_way(pdir, caplog):
    counts = _counts(pdir)
    caplog.set_level("INFO", logger="etlstage.progress")
    counts.phase("first micro-batch")
    counts.reporter(True, interval=0.0)()  # not a terminal: progress lines in the log
    lines = [r.getMessage() for r in caplog.records]
    assert any(re.fullmatch(r"progress start-up: first micro-batch [\d.]+s…", line) for line in lines), lines
    # every figure named, as the supervisor's lines (no rss or cpu: the workers run on executors)
    assert any(
        re.fullmatch(r"progress \S+ \([ETL]\): in \d+, out \d+, rate \S+, in flight \d+, restarts \d+", x)
        for x in lines
    )


def test_restarts_per_instance_under_spark_come_from_the_tallies_and_messages_stay_absent(pdir):
    counts = _counts(pdir, "run-1")
    folder = tally_dir(counts.config, "run-1")  # the driver's folder for the engine's own files
    for partition, restarts in ((0, 2), (1, 0)):
        tally = Tally("up", partition)
        tally.stats.restarts = restarts
        write(folder, tally)
    counts.tick()
    up = documents(counts)()[0]["stages"]["up"]
    assert up["instances"] == [{"instance": 0, "restarts": 2}, {"instance": 1, "restarts": 0}]


def test_the_status_page_shows_the_start_up_phases_in_a_real_browser(pdir, tmp_path):
    counts = _counts(pdir)
    for name in PHASES[:3]:
        counts.phase(name)
    take = documents(counts)
    server = ObserveServer(Snapshots(lambda: Snapshot(*take())), "127.0.0.1", 0)
    server.start()
    try:
        url = server.url
        dom = browse(url, tmp_path / "profile", "--dump-dom")
        shot = tmp_path / "status-page-spark-startup.png"
        browse(url, tmp_path / "profile", f"--screenshot={shot}", "--window-size=1280,900")
    finally:
        server.stop()
    page = figures(dom).page
    assert re.fullmatch(r"[\d.]+ (ms|s)", page["startup"]), page
    for name in PHASES[:3]:
        assert f'data-phase="{name}"' in dom, name
    assert re.search(r'data-phase="pre-flight job" data-done="false">pre-flight job [\d.]+ (ms|s)…<', dom), dom
    assert 'data-phase="JVM start" data-done="true"' in dom
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_real_spark_run_logs_every_phase_and_its_summary_counts_start_up(pdir):
    pdir.write(STAGES)
    t0 = time.monotonic()
    r = etlstage(pdir.path, "run", "--once", "--no-progress", timeout=280)
    took = time.monotonic() - t0
    assert r.code == 0, r.stderr
    assert sorted(pdir.lines("out.txt")) == sorted(str(i) for i in range(20))
    logged = re.findall(r"start-up: (.+?) took ([\d.]+)s", r.stderr)
    assert [name for name, _ in logged] == PHASES, r.stderr
    summed = sum(float(s) for _, s in logged)
    assert 0 < summed <= took
    total = float(re.search(r"the run took ([\d.]+)s in all", r.stderr).group(1))
    assert summed <= total + 0.5 and total <= took


def test_settings_that_look_secret_stay_off_the_jvms_command_line(monkeypatch: pytest.MonkeyPatch) -> None:
    """What pyspark starts its JVM with becomes ``spark-submit --conf`` arguments (``ps``):
    a secret-looking key of engine.conf is held back for the gateway (no JVM started here)."""
    from pyspark import SparkContext, java_gateway

    from etlstage.spark.setup import spark_session

    launched: list[dict[str, str]] = []  # what the JVM's command line is made of
    started: list[dict[str, str]] = []
    launched_gateway = object()
    monkeypatch.setattr(SparkContext, "_gateway", None)
    monkeypatch.setattr(
        java_gateway,
        "launch_gateway",
        lambda conf, popen_kwargs=None: launched.append(dict(conf.getAll())) or launched_gateway,
    )
    monkeypatch.setattr(
        SparkContext,
        "_ensure_initialized",
        lambda gateway=None, conf=None: started.append(dict(conf.getAll())) if gateway is launched_gateway else None,
    )
    spark_session._launch_jvm(
        {
            "spark.hadoop.fs.s3a.secret.key": "s3cret",
            "spark.hadoop.fs.s3a.access.key": "AKIA",
            "spark.hadoop.fs.s3a.session.token": "tok",
            "spark.hadoop.fs.azure.account.key.acct.dfs.core.windows.net": "azkey",
            "spark.ssl.keyPassword": "pw",
            "spark.executorEnv.DB_PASSWORD": "pw2",
            "spark.hadoop.fs.s3a.endpoint": "http://127.0.0.1:9000",
            "spark.jars": "/x.jar",
        }
    )
    public = {"spark.hadoop.fs.s3a.endpoint": "http://127.0.0.1:9000", "spark.jars": "/x.jar"}
    assert launched == [public]
    assert started == [public]  # the context on that gateway, with the same public settings


def test_sparks_python_processes_run_this_python_unless_told(monkeypatch: pytest.MonkeyPatch) -> None:
    """Spark's Python processes run `python3` from PATH unless told: from a venv that is not
    activated, that Python has neither etlstage nor pyspark and every task failed in Spark's
    worker.py ("An exception was thrown from the Python worker").  A session the project
    starts runs its tasks in this Python, unless PYSPARK_PYTHON says otherwise (no JVM
    started here)."""
    import sys

    from pyspark import SparkContext

    from etlstage.spark.setup import spark_session

    seen: list[str | None] = []

    def launch(conf: dict[str, str]) -> None:
        import os

        seen.append(os.environ.get("PYSPARK_PYTHON"))
        raise RuntimeError("no JVM in this test")

    monkeypatch.setattr(SparkContext, "_gateway", object())  # as if this process had its JVM: no class archive
    monkeypatch.setattr(spark_session, "_launch_jvm", launch)
    monkeypatch.delenv("PYSPARK_PYTHON", raising=False)
    with pytest.raises(spark_session.SparkStartError):
        spark_session.start_session("local[1]", "t", {}, connect_timeout=1, log_level="WARN")
    monkeypatch.setenv("PYSPARK_PYTHON", "/opt/other/python3")
    with pytest.raises(spark_session.SparkStartError):
        spark_session.start_session("local[1]", "t", {}, connect_timeout=1, log_level="WARN")
    assert seen == [sys.executable, "/opt/other/python3"]
