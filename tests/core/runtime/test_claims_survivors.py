"""Behaviour the mutation run (bench/mutation.py) found no fast test for."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

from etlstage.config.loader import parse_config
from etlstage.errors import PipelineError, WorkerError
from etlstage.runtime.driver import Restarts
from etlstage.runtime.flow import Inbox
from etlstage.runtime.pipeline import Pipeline
from etlstage.runtime.runner import run_pipeline
from tests.core.observe.test_observe_page import stage_figures
from tests.support.live_run import LiveRun
from tests.support.paths import FIXTURES
from tests.support.waiting import wait_for

# a cyclic E-worker that answers its first request and exits while its stdin is still open
ONE_CYCLE = "import os, sys; sys.stdin.buffer.readline(); os.write(1, b'a' + bytes([10, 0]))"


def test_an_inbox_waits_for_a_change_after_the_call_not_one_already_seen() -> None:
    """A change seen before is no reason to wake: an assembler waiting for more input
    would otherwise spin until its linger time."""

    async def scenario() -> None:
        box = Inbox(b"\n", 1 << 20)
        box.notify()  # a change the caller has already acted on
        waiting = asyncio.create_task(box.wait_changed(None))
        for _ in range(5):
            await asyncio.sleep(0)  # let the task run as far as it can
        assert not waiting.done()
        box.notify()
        await asyncio.wait_for(waiting, 5)

    asyncio.run(scenario())


def test_a_success_resets_the_failures_in_a_row(tmp_path: Path) -> None:
    """max_restarts counts failures in a row: one that follows a success is the first again."""
    text = f"""
stages:
  - {{name: e, type: E, restart: {{max_restarts: 1, backoff: 0}}, command: ["{sys.executable}", "-c", "pass"]}}
  - {{name: sink, type: L, command: ["{sys.executable}", "-c", "pass"]}}
"""
    stage = parse_config(text, base_dir=str(tmp_path)).stages[0]

    async def scenario() -> None:
        restarts = Restarts(stage, "e")
        await restarts.wait(WorkerError("crashed"))
        restarts.succeeded()
        await restarts.wait(WorkerError("crashed again"))  # the first in a row: restarted
        with pytest.raises(PipelineError, match="failed 2 times in a row"):
            await restarts.wait(WorkerError("and again"))

    asyncio.run(scenario())


def test_an_extractor_that_exits_between_cycles_is_named_as_such(pdir) -> None:
    pdir.write(f"""
        stages:
          - {{name: src, type: E, mode: cyclic, restart: {{max_restarts: 0}}, command: ["{{PY}}", "-c", "{ONE_CYCLE}"]}}
          - {{name: sink, type: L, command: ["{{PY}}", "{{TW}}", append, out.txt]}}
    """)
    r = pdir.run("--once", timeout=60)
    assert r.code != 0
    assert "exited between cycles, with nothing written for its next request" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr


def test_a_second_signal_stops_at_once_with_exit_1(pdir) -> None:
    """The first SIGTERM drains (here: never, a worker hangs, drain_timeout is long); the
    second stops at once, exit 1, saying the in-flight windows will be extracted again."""
    pdir.write("""
        drain_timeout: 120
        stages:
          - {name: src, type: E, mode: cyclic, poll_interval: 0.1, command: ["{PY}", "{TW}", count, "1000", "5"]}
          - {name: t, type: T, stop_timeout: 1, command: ["{PY}", "{TW}", hang]}
          - {name: sink, type: L, command: ["{PY}", "{TW}", append, out.txt]}
    """)
    with LiveRun(pdir.path) as run:
        wait_for(lambda: stage_figures(run)["t"]["in_flight"] > 0, 30, "the hanging worker's first request")
        run.proc.send_signal(signal.SIGTERM)
        wait_for(lambda: "stopping gracefully" in run.stderr, 30, "the first signal's log line")
        run.proc.send_signal(signal.SIGTERM)
        code = run.proc.wait(timeout=30)
        wait_for(lambda: "stopped at once" in run.stderr, 10, "the hard stop's log line")
    assert code == 1, run.stderr
    assert "stopped at once: in-flight windows will be extracted again next run" in run.stderr


def test_a_write_to_a_worker_that_does_not_read_waits_for_room(tmp_path: Path) -> None:
    """Writing waits while the worker's stdin is full (the input stays bounded in the
    supervisor); it completes once the worker reads."""
    from etlstage.kit.transport import ProcessTransport

    async def scenario() -> None:
        gate = tmp_path / "read-now"
        reader = (
            f"import os, sys, time\nwhile not os.path.exists({str(gate)!r}): time.sleep(0.01)\nsys.stdin.buffer.read()"
        )
        t = await ProcessTransport.spawn([sys.executable, "-c", reader], dict(os.environ), str(tmp_path), "deaf")
        try:
            writing = asyncio.ensure_future(t.write(b"x" * (32 << 20)))
            done, _ = await asyncio.wait({writing}, timeout=1.0)
            assert not done, "the write returned while the worker read nothing"
            gate.touch()
            await asyncio.wait_for(writing, 30)
        finally:
            t.kill()
            await t.stop(1, 1)  # closes the transport while the loop runs (no pipes left to the GC)

    asyncio.run(scenario())


# a cyclic E-worker: "a", then after 2 s "b", then an empty cycle
SLOW_CYCLES = (
    "import os, sys, time\n"
    "for i, answer in enumerate([b'a\\n', b'b\\n', b'']):\n"
    "    sys.stdin.buffer.readline()\n"
    "    if i == 1:\n"
    "        time.sleep(2)\n"
    "    os.write(1, answer + bytes([0]))\n"
    "sys.stdin.buffer.read()\n"
)


def test_a_stage_waiting_for_input_after_its_windows_are_confirmed_does_not_spin(tmp_path: Path) -> None:
    """Once a T-stage's held windows are confirmed it stops checking for quiet: while the
    extractor takes 2 s over its next cycle, the supervisor (this process) stays nearly idle."""
    tw = str(FIXTURES / "tw.py")
    (tmp_path / "cycles.py").write_text(SLOW_CYCLES)
    text = f"""
name: idle
state_dir: {tmp_path / "state"}
stages:
  - {{name: src, type: E, mode: cyclic, command: ["{sys.executable}", "cycles.py"]}}
  - {{name: t, type: T, mode: single, command: ["{sys.executable}", "{tw}", upper]}}
  - {{name: sink, type: L, command: ["{sys.executable}", "{tw}", append, "{tmp_path / "out.txt"}"]}}
"""
    cpu = time.process_time()
    assert asyncio.run(run_pipeline(parse_config(text, base_dir=str(tmp_path)), once=True, progress=False)) == 0
    spent = time.process_time() - cpu
    assert (tmp_path / "out.txt").read_text().split() == ["A", "B"]
    assert spent < 0.5, f"the supervisor spent {spent:.2f} CPU-s over a run that mostly waited 2 s"


def test_a_plain_extractor_that_exits_non_zero_after_its_output_fails_the_window(pdir) -> None:
    """Its messages came, but status 1 says the extraction was not whole: the window is not done."""
    bad_end = "import os, sys; os.write(1, b'a' + bytes([10])); sys.exit(1)"
    pdir.write(f"""
        stages:
          - {{name: src, type: E, restart: {{max_restarts: 0}}, command: ["{{PY}}", "-c", "{bad_end}"]}}
          - {{name: sink, type: L, command: ["{{PY}}", "{{TW}}", append, out.txt]}}
    """)
    r = pdir.run("--once", timeout=60)
    assert r.code == 1, r.stderr
    assert "exited with status 1 (a plain E-worker ends with 0)" in r.stderr, r.stderr


def test_a_run_that_ended_leaves_no_heartbeat_behind(tmp_path: Path) -> None:
    """After Pipeline.run() returns, nothing marks the run alive again: in a process that goes
    on (an embedding program, the harness), the state store shows no run 2.5 s later (the
    heartbeat beats every 2 s)."""
    text = f"""
state_dir: {tmp_path / "state"}
stages:
  - {{name: src, type: E, command: ["{sys.executable}", "{FIXTURES / "tw.py"}", count, "3"]}}
  - {{name: sink, type: L, command: ["{sys.executable}", "{FIXTURES / "tw.py"}", append, "{tmp_path / "out.txt"}"]}}
"""

    async def scenario() -> None:
        p = Pipeline(parse_config(text, base_dir=str(tmp_path)), once=True)
        try:
            await p.run()
            assert p.store.runs() == []
            await asyncio.sleep(2.5)
            assert p.store.runs() == [], "a heartbeat after the end marked the run alive again"
        finally:
            p.store.close()

    asyncio.run(scenario())
    assert (tmp_path / "out.txt").read_text().split() == ["0", "1", "2"]


def test_a_live_run_shows_a_rate_from_its_heartbeat_samples(tmp_path: Path) -> None:
    """An extractor writing 40 messages a second for 5 s: 4.5 s in, the live document gives
    the sink a rate above 0 and a rate history, both from the heartbeat's samples, and the
    memory of its live worker."""
    steady = "import sys, time\nfor i in range(200):\n    print(i, flush=True)\n    time.sleep(0.025)\n"
    (tmp_path / "steady.py").write_text(steady)
    text = f"""
state_dir: {tmp_path / "state"}
stages:
  - {{name: src, type: E, command: ["{sys.executable}", "steady.py"]}}
  - {{name: sink, type: L, mode: single, command: ["{sys.executable}", "{FIXTURES / "tw.py"}", append, "out.txt"]}}
"""

    async def scenario() -> dict[str, Any]:
        p = Pipeline(parse_config(text, base_dir=str(tmp_path)), once=True)
        try:
            run = asyncio.ensure_future(p.run())
            await asyncio.sleep(4.5)
            live = p.progress()
            await run
            return live["stages"]["sink"]  # type: ignore[index, return-value]
        finally:
            p.store.close()

    sink = asyncio.run(scenario())
    assert sink["rate"] > 0, sink["rate"]
    assert sink["history"] and any(rate > 0 for _, rate in sink["history"]), sink["history"]
    assert sink["rss"] > 0 and [w["rss"] > 0 for w in sink["workers"]] == [True], sink  # its live worker measured
    assert len((tmp_path / "out.txt").read_text().split()) == 200


# a T-worker killed by a signal as it starts, the first time only (as the OOM killer or an
# operator might), then the toy upper-caser
KILLED_ONCE = (
    "import os, signal, sys\n"
    "if not os.path.exists('killed-once'):\n"
    "    open('killed-once', 'w').close()\n"
    "    os.kill(os.getpid(), signal.SIGKILL)\n"
    "os.execv(sys.executable, [sys.executable, sys.argv[1], 'upper'])\n"
)


def test_a_worker_killed_by_a_signal_before_its_first_request_is_restarted(pdir) -> None:
    """A signal is not a broken command: only a worker that exits on its own before it is
    asked stops the stage at once; one killed from outside is restarted like any failure."""
    (pdir.path / "killed_once.py").write_text(KILLED_ONCE)
    pdir.write("""
        stages:
          - {name: src, type: E, command: ["{PY}", "{TW}", count, "5"]}
          - {name: t, type: T, restart: {backoff: 0}, command: ["{PY}", killed_once.py, "{TW}"]}
          - {name: sink, type: L, command: ["{PY}", "{TW}", append, out.txt]}
    """)
    r = pdir.run("--once", timeout=60)
    assert r.code == 0, r.stderr
    assert (pdir.path / "killed-once").exists()
    assert sorted(pdir.lines("out.txt")) == ["0", "1", "2", "3", "4"]
    assert "restarting it would fail the same way" not in r.stderr


def test_a_worker_that_closes_its_stdin_and_lives_on_fails_at_the_first_write(pdir) -> None:
    """Not a wait for an answer that cannot come: the write fails, and the failure says so."""
    deaf = "import os, time; os.close(0); time.sleep(60)"
    pdir.write(f"""
        stages:
          - {{name: src, type: E, command: ["{{PY}}", "{{TW}}", count, "3"]}}
          - {{name: t, type: T, restart: {{max_restarts: 0}}, timeouts: {{request: 50}}, command: ["{{PY}}", "-c", "{deaf}"]}}
          - {{name: sink, type: L, command: ["{{PY}}", "{{TW}}", append, out.txt]}}
    """)
    started = time.monotonic()
    r = pdir.run("--once", timeout=90)
    assert r.code == 1, r.stderr
    assert "stopped reading its stdin (BrokenPipeError) — it exited or closed it" in r.stderr, r.stderr
    assert time.monotonic() - started < 30


def test_windows_left_unfinished_are_counted_and_the_first_three_named() -> None:
    from etlstage.runtime.pipeline import unfinished_windows

    error = unfinished_windows([f"<window {i}>" for i in range(5)])
    assert isinstance(error, PipelineError)
    assert str(error) == "5 window(s) were not completed: ['<window 0>', '<window 1>', '<window 2>']"


def test_a_run_whose_workers_all_ended_with_a_window_not_done_fails_naming_it(tmp_path: Path, caplog) -> None:
    """The guard against a bug elsewhere: a window still open when every stage has ended
    (here: put there just before the run's end) makes the run fail, never exit 0."""
    from etlstage.runtime.flow import Window

    tw = str(FIXTURES / "tw.py")
    text = f"""
name: guard
state_dir: {tmp_path / "state"}
stages:
  - {{name: src, type: E, command: ["{sys.executable}", "{tw}", count, "3"]}}
  - {{name: sink, type: L, command: ["{sys.executable}", "{tw}", append, "{tmp_path / "out.txt"}"]}}
"""

    def open_a_window_at_the_end(p: Pipeline):
        end_run = p.store.end_run

        def end() -> None:
            src = next(iter(p.sources.values()))
            src.windows.append(Window(src.label, 99, p.n_levels))
            end_run()

        p.store.end_run = end  # type: ignore[method-assign]
        return lambda: None

    config = parse_config(text, base_dir=str(tmp_path))
    assert asyncio.run(run_pipeline(config, once=True, progress=False, attach=open_a_window_at_the_end)) == 1
    assert (tmp_path / "out.txt").read_text().split() == ["0", "1", "2"]
    assert "1 window(s) were not completed: [Window(src#99, closed=False" in caplog.text, caplog.text


# a cyclic E-worker (its own offsets): one message per request; on end of input, notes it
EOF_NOTED = r"import os, sys\nfor _ in sys.stdin.buffer: os.write(1, bytes([109, 10, 0]))\nopen('e-eof', 'w').close()"


def test_a_stop_reaches_an_extractor_that_waits_for_room_for_its_next_window(pdir) -> None:
    """An extractor with its windows in flight at their limit (one, with its own offsets)
    waits for one to commit before its next request. A graceful stop ends that wait at once:
    its stdin is closed while the sink still holds the window (here: for ever), not once
    the drain is over."""
    pdir.write(f"""
        drain_timeout: 120
        stages:
          - {{name: src, type: E, mode: cyclic, command: ["{{PY}}", "-c", "{EOF_NOTED}"]}}
          - {{name: sink, type: L, stop_timeout: 1, command: ["{{PY}}", "{{TW}}", hang]}}
    """)
    with LiveRun(pdir.path) as run:
        wait_for(lambda: stage_figures(run)["sink"]["in_flight"] > 0, 30, "the sink's first request")
        run.proc.send_signal(signal.SIGTERM)
        wait_for(lambda: (pdir.path / "e-eof").exists(), 10, "the extractor's end of input")
        run.proc.send_signal(signal.SIGTERM)  # the sink never answers: stop at once
        assert run.proc.wait(timeout=30) == 1, run.stderr


def test_a_failed_run_kills_and_reaps_its_workers_before_it_raises(tmp_path: Path) -> None:
    """Pipeline.run() raising on a failed stage has killed and reaped every worker still
    running: a program that goes on (an embedding one, the harness) is not left with a sink
    that outlives its stdin and SIGTERM until its transports are collected."""
    tw = FIXTURES / "tw.py"
    text = f"""
state_dir: {tmp_path / "state"}
stages:
  - {{name: src, type: E, command: ["{sys.executable}", "{tw}", count, "40"]}}
  - {{name: t, type: T, restart: {{max_restarts: 0}}, command: ["{sys.executable}", "{tw}", exit-early]}}
  - {{name: sink, type: L, command: ["{sys.executable}", "{tw}", ignore-term]}}
"""

    def children() -> set[int]:
        """This process's children, alive or not yet reaped (an earlier test's included)."""
        return {c.pid for c in psutil.Process().children(recursive=True)}

    async def scenario() -> None:
        p = Pipeline(parse_config(text, base_dir=str(tmp_path)), once=True)
        before = children()
        try:
            with pytest.raises(PipelineError, match="stage 't'"):
                await p.run()
            left = []
            for pid in children() - before:
                with contextlib.suppress(psutil.Error):
                    left.append((pid, psutil.Process(pid).status(), psutil.Process(pid).cmdline()))
            assert left == [], "a worker outlived the failed run, or was left unreaped"
        finally:
            p.store.close()

    asyncio.run(scenario())
