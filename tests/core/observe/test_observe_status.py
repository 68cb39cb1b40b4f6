"""`etlstage status` tells the truth: rates, window ages, a dead supervisor at once, --watch."""

from __future__ import annotations

import json
import os
import pty
import re
import select
import signal
import subprocess
import time
from collections.abc import Callable

import psutil
import pytest

from etlstage.kit.stats import LatencyHistogram, RateHistory, StageStats
from etlstage.observe.status import run_state
from tests.support.run_cli import ETLSTAGE
from tests.support.waiting import wait_for

ENDLESS = """
    stages:
      - {name: src, type: E, mode: cyclic, poll_interval: 0.1, command: ["{PY}", "{TW}", count, "100000000", "50"]}
      - {name: sink, type: L, mode: batch, batch_size: 100, command: ["{PY}", "{TW}", append, out.txt]}
"""


def start(pdir) -> subprocess.Popen[str]:
    pdir.write(ENDLESS)
    return subprocess.Popen(
        [*ETLSTAGE, "run", "stages.yaml", "--no-progress"], cwd=pdir.path, stderr=subprocess.PIPE, text=True
    )


def wait_for_heartbeats(pdir, proc: subprocess.Popen[str], n: int = 2) -> None:
    """Until the run's heartbeat is in the state store: with ``n`` >= 2, one that has a rate
    (two heartbeats) and windows in flight."""

    def beating() -> bool:
        assert proc.poll() is None, "the pipeline stopped"
        status = pdir.etlstage("status", "--json")
        if status.code != 0:  # no state store yet
            return False
        doc = json.loads(status.stdout)
        if not doc["running"] or "stages" not in (doc["running"][0]["progress"] or {}):
            return False
        return n < 2 or (doc["running"][0]["progress"]["stages"]["src"]["rate"] > 0 and bool(doc["windows_in_flight"]))

    wait_for(beating, 30, f"{n} heartbeat(s) of the run", every=0.3)


def read_until(fd: int, done: Callable[[bytes], bool], within: float = 30) -> bytes:
    """Bytes read from ``fd`` until ``done(everything read)``; fails after ``within`` seconds."""
    got = b""
    deadline = time.monotonic() + within
    while not done(got):
        left = deadline - time.monotonic()
        assert left > 0, got
        if select.select([fd], [], [], left)[0]:
            chunk = os.read(fd, 65536)
            assert chunk, got
            got += chunk
    return got


@pytest.mark.slow
def test_status_of_a_live_run_shows_rates_and_window_ages_then_a_killed_supervisor_as_dead_at_once(pdir):
    proc = start(pdir)
    try:
        wait_for_heartbeats(pdir, proc)
        shown: list = []

        def window_shown() -> bool:
            # a window closes and the next opens all the time: a status read between the two
            # (a busy machine) shows none, the next read one
            live = pdir.etlstage("status")
            shown[:] = [live]
            pattern = r"^  src #(\d+): (extracting|loading|committing), open ([\d.]+)(s|min)"
            return live.code == 0 and bool(re.findall(pattern, live.stdout, re.M))

        wait_for(window_shown, 30, "a window in flight in the status", every=0.2)
        (live,) = shown
        assert f"running: pid {proc.pid}" in live.stdout, live.stdout
        row = re.search(r"^  src\s+([\d,]+)\s+([\d,]+)\s+([\d,]+)/s", live.stdout, re.M)
        assert row and int(row[3].replace(",", "")) > 0, live.stdout  # the current rate
        doc = json.loads(pdir.etlstage("status", "--json").stdout)
        (run,) = doc["running"]
        assert run["state"] == "running" and run["progress"]["stages"]["src"]["rate"] > 0
        assert all(w["age_seconds"] >= 0 and w["messages"] is not None for w in doc["windows_in_flight"])

        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
        dead = pdir.etlstage("status")  # at once: no waiting for the heartbeat to go stale
        assert "running: no" in dead.stdout, dead.stdout
        assert f"dead: supervisor pid {proc.pid}" in dead.stdout
        assert "extracted again by the next run" in dead.stdout
        doc = json.loads(pdir.etlstage("status", "--json").stdout)
        assert doc["running"] == [] and [d["pid"] for d in doc["dead"]] == [proc.pid]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()

    # the next run takes over: when it ends, the dead run is no longer reported
    pdir.write(ENDLESS.replace("100000000", str(len(pdir.lines("out.txt")) + 100)))
    again = pdir.run("--once")
    assert again.code == 0, again.stderr
    after = pdir.etlstage("status")
    assert "dead:" not in after.stdout and "running: no" in after.stdout, after.stdout
    assert "windows in flight: 0" in after.stdout


def test_the_live_document_follows_each_commit_within_a_moment(pdir):
    """The status table's figures come from the run's live document, its checkpoints from
    the store: written only every two seconds, the table showed 1,000 loaded beside 3,000
    committed.  A commit now has the document written again within a fraction of a second."""
    proc = start(pdir)
    try:
        wait_for_heartbeats(pdir, proc, n=1)
        worst = 0.0
        deadline = time.monotonic() + 4.0  # two steady heartbeats' worth of commits
        while time.monotonic() < deadline:
            assert proc.poll() is None, "the pipeline stopped"
            doc = json.loads(pdir.etlstage("status", "--json").stdout)
            (run,) = doc["running"]
            (checkpoint,) = doc["checkpoints"]
            # how much older the table's figures are than the newest checkpoint beside them
            worst = max(worst, checkpoint["updated_at"] - run["progress"]["time"])
        assert worst < 1.0, f"the live document trailed a commit by {worst:.2f}s"
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.slow
def test_status_watch_refreshes_until_interrupted(pdir):
    proc = start(pdir)
    try:
        wait_for_heartbeats(pdir, proc, n=1)
        watch = subprocess.Popen(
            [*ETLSTAGE, "status", "--watch", "--interval", "0.3"],
            cwd=pdir.path,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert watch.stdout is not None
        seen = read_until(watch.stdout.fileno(), lambda got: got.count(b"state: ") >= 3).decode()
        watch.send_signal(signal.SIGINT)
        rest, err = watch.communicate(timeout=10)
        out = seen + rest
        assert watch.returncode == 0, err
        assert out.count("state: ") >= 3 and out.count(f"running: pid {proc.pid}") >= 3, out
        assert "\x1b[" not in out  # not a terminal: plain frames, one after another

        main, secondary = pty.openpty()
        on_tty = subprocess.Popen(
            [*ETLSTAGE, "status", "--watch", "--interval", "0.3"],
            cwd=pdir.path,
            stdout=secondary,
            stderr=subprocess.PIPE,
        )
        os.close(secondary)
        screen = read_until(main, lambda got: got.count(b"\x1b[H") >= 3)
        on_tty.send_signal(signal.SIGINT)
        on_tty.wait(timeout=10)
        while True:
            try:
                chunk = os.read(main, 65536)
            except OSError:
                break
            if not chunk:
                break
            screen += chunk
        os.close(main)
        assert on_tty.returncode == 0
        assert screen.count(b"\x1b[H") >= 3 and b"state: " in screen  # redrawn in place
    finally:
        proc.kill()
        proc.wait()


def test_run_state_marks_a_gone_or_reused_pid_dead_and_a_silent_one_not_responding():
    now = time.time()
    me = psutil.Process()
    assert run_state(me.pid, me.create_time() + 0.5, now, now) == "running"
    assert run_state(me.pid, me.create_time() + 0.5, now - 60, now) == "not responding"
    assert run_state(me.pid, me.create_time() - 3600, now, now) == "dead"  # the pid now belongs to a later process
    gone = subprocess.Popen(["true"])
    gone.wait()
    assert run_state(gone.pid, now, now, now) == "dead"


def test_rate_history_gives_current_rates_and_a_series():
    stats = {"src": StageStats("src", "E"), "sink": StageStats("sink", "L")}
    history = RateHistory(span=10, every=2)
    for i, t in enumerate((0.0, 2.0, 4.0, 6.0)):
        stats["src"].messages_out = 1000 * i
        stats["sink"].messages_in = 500 * i
        history.sample(stats, now=t)
    assert history.rate("src") == pytest.approx(500.0)
    assert history.rate("sink", over=2.0) == pytest.approx(250.0)
    assert history.series("src") == [(4.0, 500.0), (2.0, 500.0), (0.0, 500.0)]
    for t in range(8, 40, 2):
        history.sample(stats, now=float(t))
    assert len(history.samples) == 6 and history.rate("src") == 0.0  # span bounds the memory


def test_two_samples_at_the_same_time_give_no_rate_between_them():
    """A sample taken twice in the same instant (a heartbeat right after a commit's) has
    no time between them to divide by: it is left out of the series."""
    stats = {"src": StageStats("src", "E")}
    history = RateHistory(span=10, every=2)
    history.sample(stats, now=4.0)
    stats["src"].messages_out = 10
    history.sample(stats, now=4.0)
    assert history.series("src") == []
    history.sample(stats, now=6.0)
    assert history.series("src") == [(0.0, 0.0)]


def test_a_rate_is_taken_over_its_last_seconds_only_not_the_whole_history():
    """Idle for 20 s, then 100 messages/s for 10 s: the rate over the last 10 s is 100, not
    the 33 the whole 30 s of samples would give, nor the last 2 s alone once it changes."""
    stats = {"src": StageStats("src", "E")}
    history = RateHistory(span=60, every=2)
    for t in range(0, 32, 2):
        stats["src"].messages_out = 100 * max(0, t - 20)
        history.sample(stats, now=float(t))
    assert history.rate("src", over=10.0) == pytest.approx(100.0)
    assert history.rate("src", over=30.0) == pytest.approx(1000 / 30)
    history.sample(stats, now=32.0)  # then 2 s idle
    assert history.rate("src", over=10.0) == pytest.approx(80.0)  # 800 in the last 10 s


def test_latency_histogram_is_cumulative_with_an_inf_bucket():
    h = LatencyHistogram()
    for s in (0.0005, 0.003, 0.003, 2.0, 9999.0):
        h.observe(s)
    buckets = dict(h.cumulative())
    assert buckets["0.001"] == 1 and buckets["0.005"] == 3 and buckets["2.5"] == 4 and buckets["+Inf"] == 5
    assert h.count == 5 and h.sum == pytest.approx(10001.0065)


def test_the_histograms_of_several_workers_sum_counts_and_seconds():
    """The Spark engine's request latency is one histogram of its executors' workers:
    every bucket and the seconds of each go in."""
    a, b = LatencyHistogram(), LatencyHistogram()
    for s in (0.0005, 2.0):
        a.observe(s)
    b.observe(0.003)
    total = LatencyHistogram.sum_of([a, b])
    assert dict(total.cumulative()) == {k: dict(a.cumulative())[k] + n for k, n in b.cumulative()}
    assert total.count == 3 and total.sum == pytest.approx(2.0035)
    assert (a.count, b.count) == (2, 1)  # the parts are left as they were


def test_reported_counters_become_labelled_gauges_in_base_units():
    from prometheus_client import CollectorRegistry, generate_latest
    from prometheus_client.parser import text_string_to_metric_families

    from etlstage.observe.live import Snapshot
    from etlstage.observe.metrics import PipelineCollector

    def stage(reports: dict[str, object]) -> dict[str, object]:
        return {
            **dict.fromkeys(("in", "out", "jobs", "in_flight", "bytes_in", "bytes_out", "restarts", "deadletters"), 1),
            "failures": {},
            "latency": {},
            "reports": reports,
        }

    live = {
        "pipeline": "p",
        "time": 1000.0,
        "elapsed": 10.0,
        "windows_in_flight": 0,
        "stages": {
            "kinesis": stage({"records": 7, "lag ms": {"shard-1": 1500, "shard-2": 0}}),
            "rdss": stage({"errors": {"GENERR001": 2}, "records": {"x": 1}}),  # "records" as named numbers here
        },
    }
    registry = CollectorRegistry(auto_describe=False)
    registry.register(PipelineCollector(lambda: Snapshot(live, {"checkpoints": [], "deadletters": {}})))
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for fam in text_string_to_metric_families(generate_latest(registry).decode())
        for s in fam.samples
    }
    assert (
        samples[("etlstage_reported_lag_seconds", (("key", "shard-1"), ("pipeline", "p"), ("stage", "kinesis")))] == 1.5
    )
    assert samples[("etlstage_reported_errors", (("key", "GENERR001"), ("pipeline", "p"), ("stage", "rdss")))] == 2
    assert samples[("etlstage_reported_records", (("pipeline", "p"), ("stage", "kinesis")))] == 7
    # the other shape of the same name is left out rather than mixing label sets in one family
    assert not [k for k in samples if k[0] == "etlstage_reported_records" and dict(k[1]).get("stage") == "rdss"]
    assert samples[("etlstage_pipeline_start_time_seconds", (("pipeline", "p"),))] == 990.0


def test_status_says_how_many_messages_were_sent_again_and_to_which_stage():
    from etlstage.observe.status import render

    doc = {
        "time": 0.0,
        "running": [
            {
                "pid": 1,
                "started_at": 0.0,
                "heartbeat": 0.0,
                "state": "running",
                "progress": {"stages": {"t": {"in": 9, "out": 9, "in_flight": 0, "resent": 4}}},
            }
        ],
        "dead": [],
        "checkpoints": [],
        "windows_in_flight": [],
        "deadletters": {"total": 0, "new": 0},
    }
    assert "  sent again after a worker failure: 4 message(s) to stage 't'" in "\n".join(render(doc, "x"))
