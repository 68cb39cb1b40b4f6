"""The live progress table (kit.progress) of any run: drawn in place on a terminal, and
erased when the run ends so that the summary takes its place."""

from __future__ import annotations

import asyncio
import contextlib
import io
import time
from dataclasses import dataclass, field

from etlstage.kit.progress import report, summary, table
from etlstage.kit.stats import StageStats
from etlstage.protocol.vocabulary import StageType


@dataclass
class Opened:
    windows: list[int] = field(default_factory=list)


@dataclass
class Run:
    """Shaped like a run, as the Spark engine's counts are: no supervisor needed."""

    started: float = field(default_factory=time.monotonic)
    stats: dict[str, StageStats] = field(default_factory=dict)
    sources: dict[str, Opened] = field(default_factory=lambda: {"src": Opened([1, 2])})


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def a_run() -> Run:
    run = Run()
    run.stats = {"src": StageStats("src", StageType.E), "sink": StageStats("sink", StageType.L)}
    run.stats["src"].messages_out = 30
    run.stats["sink"].messages_in = 30
    return run


def test_the_table_is_drawn_in_place_and_erased_at_the_end():
    run, screen = a_run(), Terminal()

    async def main() -> None:
        task = asyncio.create_task(report(run, screen))
        deadline = time.monotonic() + 10
        while "windows in flight" not in screen.getvalue():  # the first frame, after a second
            assert time.monotonic() < deadline, "no frame drawn within 10 s"
            await asyncio.sleep(0.02)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    asyncio.run(main())
    rows = len(table(run))
    drawn = screen.getvalue()
    assert "windows in flight: 2" in drawn
    assert drawn.endswith(f"\x1b[{rows}F\x1b[J"), repr(drawn[-40:])  # back up over the rows, clear them


def test_the_summary_adds_up_whatever_runs():
    text = summary(a_run())
    assert "extracted 30 messages" in text
    assert text.splitlines()[1].split()[:4] == ["src", "E", "0", "30"]


def test_the_summary_says_where_each_loader_wrote_as_its_worker_reports_it(tmp_path):
    run = a_run()
    run.stats["sink"].state_dir = str(tmp_path)
    run.stats["sink"].pids = [41]
    (tmp_path / "report-0-41.json").write_text('{"output": "output/numbers.txt", "written": 30}')
    lines = summary(run).splitlines()
    assert "stage 'sink' loaded into: output/numbers.txt" in lines
    assert "sink: written 30" in lines  # the counters stay counters; the output is not one
    run.stats["sink"].pids = []  # a worker that reports nothing
    assert any(
        line.startswith("stage 'sink' loaded 30 message(s); its worker does not say where")
        for line in summary(run).splitlines()
    )


class Pipe(io.StringIO):
    def isatty(self) -> bool:
        return False


def test_progress_lines_without_a_terminal_name_every_figure(caplog):
    run, log = a_run(), Pipe()

    async def main() -> None:
        task = asyncio.create_task(report(run, log, interval=0.05))
        deadline = time.monotonic() + 10
        while not any("windows in flight" in r.getMessage() for r in caplog.records):
            assert time.monotonic() < deadline, "no progress line within 10 s"
            await asyncio.sleep(0.02)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    with caplog.at_level("INFO", logger="etlstage.progress"):
        asyncio.run(main())
    lines = [r.getMessage() for r in caplog.records]
    src = next(line for line in lines if line.startswith("progress src"))
    assert src.startswith("progress src (E): in 0, out 30, rate "), src
    assert ", in flight 0, restarts 0, rss " in src, src
    assert "progress windows in flight 2, elapsed " in lines[len(run.stats)], lines


def test_the_twice_caveat_only_when_the_stages_workers_had_answered_something():
    run = a_run()
    run.stats["sink"].resent = 12
    run.stats["sink"].jobs = 3
    assert "12 message(s) to stage 'sink' (a loader not idempotent may have them twice)" in summary(run)
    run.stats["sink"].jobs = 0  # its workers never answered a request: nothing could be loaded twice
    assert "sent again after a worker failure: 12 message(s) to stage 'sink'" in summary(run)
    assert "twice" not in summary(run)


def test_each_figure_ends_under_its_columns_name():
    run = a_run()
    run.started -= 3600  # a rate that fits its column
    run.stats["sink"].messages_in = 1_234_567
    run.stats["sink"].in_flight = 7
    run.stats["sink"].restarts = 3
    for live in (False, True):
        head, *rows = table(run, live=live)[:3]
        sink = next(r for r in rows if r.startswith("sink"))
        for name, value in (("in", "1,234,567"), ("in flight", "7"), ("restarts", "3")):
            end = head.index(name if name != "in" else " in ") + len(name) + (1 if name == "in" else 0)
            assert sink[:end].endswith(value), (name, head, sink)
        if live:
            assert sink.rstrip().endswith("%") and head.rstrip().endswith("cpu")
