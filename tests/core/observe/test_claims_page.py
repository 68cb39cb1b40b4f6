"""The status page's dead-letter, in-flight, queued and latency figures in a real browser, and
each worker's CPU time on /metrics checked against the operating system's own account.

The run stalls on purpose: ``stuck`` answers its first batch and never another, so once
``picky`` has set its poison message aside nothing moves, and the page, /api/status and
/metrics all describe one frozen state.
"""

from __future__ import annotations

import json
import subprocess
import time
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path

import psutil
import pytest

import etlstage.observe
from tests.core.observe.test_observe_page import browse, count, figures
from tests.support.live_run import LiveRun
from tests.support.scrapes import scrape, value

STAGES = """
    name: demo
    stages:
      - {name: src, type: E, mode: cyclic, poll_interval: 0.2, command: ["{PY}", "{TW}", count, "1000", "30"]}
      - {name: picky, type: T, mode: batch, batch_size: 5, on_failure: deadletter,
         restart: {max_restarts: 1, backoff: 0.05}, command: ["{PY}", "{TW}", poison, "7"]}
      - {name: stuck, type: T, mode: batch, batch_size: 5, command: ["{PY}", "{TW}", hang-after-first]}
      - {name: sink, type: L, command: ["{PY}", "{TW}", append, out.txt]}
"""


def to_fixed(x: float, digits: int) -> str:
    """JavaScript's ``Number.toFixed``: a tie on the exact binary value goes away from zero,
    where Python's format goes to even (314.5 is 315 on the page, 314 in an f-string)."""
    return str(Decimal(x).quantize(Decimal(1).scaleb(-digits), rounding=ROUND_HALF_UP))


def secs(s: float) -> str:
    """The page's rendering of a duration (app.js ``secs``), for the values this run produces."""
    if s == 0:
        return "0 s"
    if s < 0.001:
        return f"{to_fixed(s * 1e6, 0)} µs"
    if s < 1:
        return f"{to_fixed(s * 1000, 2 if s < 0.01 else 0)} ms"
    return f"{to_fixed(s, 1)} s"


def frozen(run: LiveRun, within: float = 60) -> dict:
    """The stage figures of /api/status once the run has stalled: picky took in the window's
    30 messages and set one aside, stuck answered one batch, has two in flight and every
    other result of picky queued."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        stages = json.loads(run.get("/api/status")[2])["running"][0]["progress"]["stages"]
        picky, stuck = stages["picky"], stages["stuck"]
        if (
            picky["in"] == 30
            and picky["deadletters"] == 1
            and picky["in_flight"] == 0
            and stuck["jobs"] == 1
            and stuck["in_flight"] == 2
            and stuck["in"] + stuck["queued"]["messages"] == picky["out"]  # results sent again count twice
        ):
            return stages
        time.sleep(0.1)
    pytest.fail("the run never stalled as planned:\n" + run.stderr)


@pytest.mark.slow
def test_the_page_shows_dead_letters_in_flight_queued_and_latency(pdir, tmp_path):
    pdir.write(STAGES)
    with LiveRun(pdir.path) as run:
        stages = frozen(run)
        page = figures(browse(run.url, tmp_path / "profile", "--dump-dom"))
        metrics, _ = scrape(run)
        cpu = {
            w["pid"]: value(metrics, "etlstage_worker_cpu_seconds_total", stage=name, instance=str(w["instance"]))
            for name in ("picky", "stuck")
            for w in stages[name]["workers"]
        }
        os_cpu = {pid: sum(psutil.Process(pid).cpu_times()[:2]) for pid in cpu}

    assert page.page["deadletters"] == "1 (1 new)"
    assert page.stages["picky"]["deadletters"] == "1" and page.stages["stuck"]["deadletters"] == "0"
    stuck = stages["stuck"]
    assert count(page.stages["stuck"]["in_flight"]) == stuck["in_flight"] == 2
    assert count(page.stages["stuck"]["queued"]) == stuck["queued"]["messages"] > 0
    assert count(page.stages["picky"]["queued"]) == 0 and count(page.stages["picky"]["in_flight"]) == 0
    # one answer: its latency is the mean, and p95 the bound of the first bucket holding it
    buckets = stuck["latency"]["buckets"]
    assert buckets[-1][1] == 1
    assert page.stages["stuck"]["latency_mean"] == secs(stuck["latency"]["sum"])
    hit = next(i for i, (_, n) in enumerate(buckets) if n >= 1)
    expected_p95 = (
        "> " + secs(float(buckets[-2][0])) if buckets[hit][0] == "+Inf" else "≤ " + secs(float(buckets[hit][0]))
    )
    assert page.stages["stuck"]["latency_p95"] == expected_p95
    picky = stages["picky"]["latency"]  # many answers: the mean is the sum over the count
    assert picky["buckets"][-1][1] > 1
    assert page.stages["picky"]["latency_mean"] == secs(picky["sum"] / picky["buckets"][-1][1])
    # CPU seconds: more than nothing, and no more than the OS counted for the process afterwards
    assert cpu and all(0 < cpu[pid] <= os_cpu[pid] + 0.01 for pid in cpu), (cpu, os_cpu)


def test_secs_renders_like_the_page_at_ties(tmp_path):
    """The helper above against app.js's own ``secs`` run by Node, on exact binary ties
    (314.5 µs, 2.5 ms…) where Python's and JavaScript's rounding part ways."""
    source = (Path(etlstage.observe.__file__).parent / "page" / "app.js").read_text()
    function = source[source.index("function secs(") :]
    function = function[: function.index("\n}\n") + 3]
    values = [0.0003145, 0.0003144, 0.0000005, 0.0025, 0.0125, 0.5125, 1.25, 0.000999]
    script = tmp_path / "secs.js"
    script.write_text(function + f"console.log(JSON.stringify({json.dumps(values)}.map(secs)));\n")
    rendered = json.loads(subprocess.run(["node", str(script)], capture_output=True, text=True, check=True).stdout)
    assert rendered == [secs(v) for v in values]
