"""The status page in a real browser: headless Chromium loads it during a run."""

from __future__ import annotations

import json
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from tests.support.live_run import LiveRun
from tests.support.waiting import wait_for

STAGES = """
    name: demo
    stages:
      - {name: src, type: E, mode: cyclic, poll_interval: 0.2, command: ["{PY}", "{TW}", count, "100000000", "200"]}
      - {name: shout, type: T, mode: batch, batch_size: 50, command: ["{PY}", "{TW}", counting]}
      - {name: sink, type: L, mode: batch, batch_size: 100, command: ["{PY}", "{TW}", append, out.txt]}
"""


def chromium() -> str:
    found = shutil.which("chromium")
    if found is None:
        pytest.fail("no `chromium` on PATH: the status page test needs Debian's chromium (.ci/run installs it)")
    return found


def browse(url: str, profile: Path, *args: str) -> str:
    """What headless Chromium shows at ``url`` once its scripts ran (stdout: --dump-dom)."""
    proc = subprocess.run(
        [
            chromium(),
            "--headless",
            "--no-sandbox",  # tests run as root in CI containers
            "--disable-gpu",
            f"--user-data-dir={profile}",
            "--virtual-time-budget=3000",
            *args,
            url,
        ],
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


class Figures(HTMLParser):
    """Each stage card's ``data-figure`` texts, and the page-wide ones."""

    def __init__(self) -> None:
        super().__init__()
        self.stages: dict[str, dict[str, str]] = {}
        self.page: dict[str, str] = {}
        self._stage: str | None = None
        self._depth = 0
        self._figure: tuple[str, int] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        self._depth += 1
        if tag == "article" and a.get("data-stage"):
            self._stage = a["data-stage"]
            self.stages[self._stage or ""] = {}
            self._stage_depth = self._depth
        if a.get("data-figure") and self._figure is None:
            self._figure = (a["data-figure"] or "", self._depth)
            self._text: list[str] = []

    def handle_endtag(self, tag: str) -> None:
        if self._figure is not None and self._figure[1] == self._depth:
            target = self.stages[self._stage] if self._stage is not None else self.page
            target[self._figure[0]] = "".join(self._text).strip()
            self._figure = None
        if self._stage is not None and tag == "article" and self._depth == self._stage_depth:
            self._stage = None
        self._depth -= 1

    def handle_data(self, data: str) -> None:
        if self._figure is not None:
            self._text.append(data)


def figures(dom: str) -> Figures:
    parsed = Figures()
    parsed.feed(dom)
    return parsed


def count(text: str) -> int:
    return int(text.replace(",", ""))


def stage_figures(run: LiveRun) -> dict[str, Any]:
    """Each stage's figures in /api/status of the run."""
    return json.loads(run.get("/api/status")[2])["running"][0]["progress"]["stages"]


@pytest.mark.slow
def test_the_page_shows_every_stage_and_live_figures_in_a_real_browser(pdir, tmp_path):
    pdir.write(STAGES)
    with LiveRun(pdir.path) as run:
        wait_for(lambda: stage_figures(run)["shout"]["rate"] > 0, 30, "a rate: two heartbeats, a chart to draw")
        first = figures(browse(run.url, tmp_path / "profile", "--dump-dom"))
        wait_for(lambda: stage_figures(run)["sink"]["in"] > count(first.stages["sink"]["in"]), 30, "more loaded")
        second = figures(browse(run.url, tmp_path / "profile", "--dump-dom"))
        shot = tmp_path / "status-page.png"
        browse(run.url, tmp_path / "profile", f"--screenshot={shot}", "--window-size=1280,900")
        phone = tmp_path / "status-page-phone.png"
        browse(run.url, tmp_path / "profile", f"--screenshot={phone}", "--window-size=390,844")
        assert run.stop() == 0, run.stderr

    for page in (first, second):
        assert set(page.stages) == {"src", "shout", "sink"}
        assert page.page["state"].endswith("running")
    # E shows what it extracted, L what it took in; both move between the two loads
    assert count(second.stages["src"]["out"]) > count(first.stages["src"]["out"]) > 0
    assert count(second.stages["sink"]["in"]) > count(first.stages["sink"]["in"]) > 0
    assert "in" not in first.stages["src"] and "out" not in first.stages["sink"]
    assert count(first.stages["shout"]["rate"].split()[0]) > 0  # messages/s from the rate history
    assert first.page["elapsed"] != second.page["elapsed"]
    assert "seen:" in first.stages["shout"]["reports"]  # the counters the worker reports
    for png in (shot, phone):
        data = png.read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000, png


HOSTILE = "<!--<script>"
HOSTILE_WORKER = f"""
from etlstage.worker import Transformer, main


class Hostile(Transformer):
    def process(self, messages):
        return messages

    def report(self):
        return {{{HOSTILE!r}: 1, "</script><b>": 2}}


main(Hostile())
"""


@pytest.mark.slow
def test_the_page_renders_hostile_names_and_report_keys_in_a_real_browser(pdir, tmp_path):
    (pdir.path / "hostile.py").write_text(HOSTILE_WORKER)
    pdir.write(
        STAGES.replace("name: demo", f"name: '{HOSTILE} demo'").replace(
            '["{PY}", "{TW}", counting]', '["{PY}", "hostile.py"]'
        )
    )
    with LiveRun(pdir.path) as run:
        # the worker's first report is in (the pipeline's name holds HOSTILE too: look at the stage's reports)
        wait_for(
            lambda: HOSTILE in json.dumps(stage_figures(run)["shout"]["reports"]),
            30,
            "the hostile report in /api/status",
            every=0.2,
        )
        dom = browse(run.url, tmp_path / "profile", "--dump-dom")
        assert run.stop() == 0, run.stderr
    page = figures(dom)
    assert set(page.stages) == {"src", "shout", "sink"}, dom[-3000:]
    assert page.page["state"].endswith("running")
    assert f"{HOSTILE} demo" in dom.replace("&lt;", "<").replace("&gt;", ">")  # shown as text
    assert "<!--<script>" not in dom.split("<body>")[1].split('<script id="initial-state"')[0]  # never markup
    assert HOSTILE in page.stages["shout"]["reports"].replace("&lt;", "<")
