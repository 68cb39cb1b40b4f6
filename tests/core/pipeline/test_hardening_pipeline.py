"""What a pipeline does with messages a stage cannot take, and how long a stop may take."""

from __future__ import annotations

import json
import subprocess
import time

import psutil
import pytest

from tests.support.processes import live_command
from tests.support.sigterm import run_then_sigterm
from tests.support.waiting import wait_for


def source(pdir, *lines: str) -> str:
    """An E-stage command that writes ``lines`` as messages."""
    (pdir.path / "in.txt").write_text("".join(f"{x}\n" for x in lines))
    (pdir.path / "src.py").write_text("import sys\nsys.stdout.write(open('in.txt').read())\n")
    return '["{PY}", "src.py"]'


def test_a_message_holding_the_loaders_eop_marker_goes_to_the_dead_letter_store(pdir):
    pdir.write(f"""
        stages:
          - {{name: src, type: E, command: {source(pdir, "one", "two#three", "four")}}}
          - {{name: sink, type: L, markers: {{eop: "#"}}, on_failure: deadletter,
              command: ["{{PY}}", "{{TW}}", append, out.txt]}}
    """)
    r = pdir.run("--once")
    assert r.code == 0, r.stderr
    assert pdir.lines("out.txt") == ["one", "four"]
    listing = pdir.etlstage("deadletter", "list")
    assert "stage 'sink' 1 message(s)" in listing.stdout, listing.stdout
    shown = pdir.etlstage("deadletter", "show", "1")
    assert "two#three" in shown.stdout
    assert "EOP marker 0x23" in shown.stdout


def test_under_on_failure_fail_the_same_message_stops_the_run_naming_it(pdir):
    pdir.write(f"""
        stages:
          - {{name: src, type: E, command: {source(pdir, "one", "two#three")}}}
          - {{name: sink, type: L, markers: {{eop: "#"}}, command: ["{{PY}}", "{{TW}}", append, out.txt]}}
    """)
    r = pdir.run("--once")
    assert r.code == 1
    assert "stage 'sink' contains its EOP marker 0x23" in r.stderr
    assert "two#three" in r.stderr
    assert "checkpoints: none yet" in pdir.etlstage("status").stdout


def test_a_message_over_the_loaders_max_message_bytes_is_not_sent_to_it(pdir):
    pdir.write(f"""
        stages:
          - {{name: src, type: E, command: {source(pdir, "short", "x" * 40, "tiny")}}}
          - {{name: sink, type: L, max_message_bytes: 16, on_failure: deadletter,
              command: ["{{PY}}", "{{TW}}", append, out.txt]}}
    """)
    r = pdir.run("--once")
    assert r.code == 0, r.stderr
    assert pdir.lines("out.txt") == ["short", "tiny"]
    shown = pdir.etlstage("deadletter", "show", "1")
    assert "a message of 40 bytes for stage 'sink' is over its max_message_bytes of 16" in shown.stdout


def t_in_flight(pdir) -> int:
    """Requests in flight at stage t, from the run's last heartbeat (0 before the first)."""
    status = pdir.etlstage("status", "--json")
    running = json.loads(status.stdout)["running"] if status.code == 0 else []
    stages = (running[0]["progress"] or {}).get("stages", {}) if running else {}
    return stages.get("t", {}).get("in_flight", 0)


def test_a_graceful_stop_is_bounded_by_drain_timeout_and_leaves_no_process(pdir):
    pdir.write("""
        drain_timeout: 2
        stages:
          - {name: src, type: E, mode: cyclic, poll_interval: 0.1, command: ["{PY}", "{TW}", count, "1000", "5"]}
          - {name: t, type: T, stop_timeout: 1, command: ["{PY}", "{TW}", hang]}
          - {name: sink, type: L, command: ["{PY}", "{TW}", append, out.txt]}
    """)
    children: list[psutil.Process] = []

    def workers_up(proc: subprocess.Popen[str]) -> None:
        deadline = time.time() + 30
        while time.time() < deadline and len(children) < 3:
            time.sleep(0.2)
            children[:] = psutil.Process(proc.pid).children(recursive=True)
        assert len(children) >= 3
        wait_for(lambda: t_in_flight(pdir), 30, "the hanging T-worker's first request (a heartbeat shows it)")

    code, err, took = run_then_sigterm(pdir.path, workers_up)
    assert code == 1, err
    # drain_timeout (2 s), then stdin closed, 1 s, SIGTERM: the hanging worker dies
    assert took < 12, took
    assert "did not drain within drain_timeout (2s)" in err
    # the workers it stopped did not fail: no restart is announced, none counted
    assert "t stopped by the pipeline before it finished" in err, err
    assert "of at most" not in err and " failed (" not in err, err
    _, alive = psutil.wait_procs(children, timeout=5)
    assert not alive, [p.cmdline() for p in alive]
    assert "checkpoints: none yet" in pdir.etlstage("status").stdout


ENDLESS = (
    "import sys, time\n"
    "n = 0\n"
    "while True:\n"
    "    sys.stdout.write(f'{n}\\n'); sys.stdout.flush(); n += 1\n"
    "    time.sleep(0.02)\n"
)


def test_a_graceful_stop_asks_a_plain_extractor_that_never_ends_to_end(pdir):
    """A plain E-worker that would write forever (a tail, a generator): SIGTERM closes its
    stdin, then sends it SIGTERM after its stop_timeout, and the run ends well inside
    drain_timeout, exit 0, with what it loaded loaded (its window extracted again next run)."""
    (pdir.path / "endless.py").write_text(ENDLESS)
    pdir.write("""
        drain_timeout: 60
        stages:
          - {name: src, type: E, stop_timeout: 1, command: ["{PY}", endless.py]}
          - {name: sink, type: L, command: ["{PY}", "{TW}", append, out.txt]}
    """)

    def loaded(_: subprocess.Popen[str]) -> None:
        wait_for(lambda: (pdir.path / "out.txt").exists(), 30, "the first messages loaded")

    code, err, took = run_then_sigterm(pdir.path, loaded, within=90)
    assert code == 0, err
    assert took < 20, (took, err)
    assert "did not exit 1s after stdin closed; sending SIGTERM" in err, err
    assert "src stopped before its end; its window will be extracted again next run" in err, err
    assert "did not drain" not in err, err
    assert pdir.lines("out.txt")[:3] == ["0", "1", "2"]


# a cyclic E-worker that takes its first request and exits 1 (a source that fails at once)
CRASH_ON_REQUEST = "import os, sys\nos.read(0, 65536)\nsys.exit(1)\n"
COUNTED = """[sh, -c, 'echo start >> starts; exec "$0" "$@"', "{PY}", """
BACKOFF = "restart: {max_restarts: 5, backoff: 3}"
CRASHING = {
    "t": f"""
          - {{name: src, type: E, mode: cyclic, poll_interval: 0.1, command: ["{{PY}}", "{{TW}}", count, "1000", "5"]}}
          - {{name: t, type: T, {BACKOFF}, command: {COUNTED}"{{TW}}", poison, "0"]}}""",
    "src": f"""
          - {{name: src, type: E, mode: cyclic, poll_interval: 0.1, {BACKOFF}, command: {COUNTED}crash_e.py]}}""",
}


@pytest.mark.parametrize("crashing", sorted(CRASHING))
def test_a_worker_waiting_out_its_backoff_when_the_pipeline_stops_its_workers_is_not_started_again(pdir, crashing):
    """A worker (a T-worker, or an E-worker on its request) crashes and waits its 3 s
    back-off; SIGTERM comes at once, the drain (1 s) times out and the pipeline stops its
    workers, which takes 5 s (the sink ignores its closed stdin until SIGTERM). The back-off
    ends in those 5 s (with 2 s to spare either side for a slow machine), and no worker is
    started in a pipeline stopping its workers (nor does its end cut the others' stop short):
    one start, and nothing left running."""
    (pdir.path / "crash_e.py").write_text(CRASH_ON_REQUEST)
    pdir.write(
        "drain_timeout: 1\nstages:"
        + CRASHING[crashing]
        + """
          - {name: sink, type: L, stop_timeout: 5, command: ["{PY}", "{TW}", hang]}
    """
    )
    starts = pdir.path / "starts"
    children: list[psutil.Process] = []
    marker = {"t": "poison", "src": "crash_e.py"}[crashing]

    def first_crash(proc: subprocess.Popen[str]) -> None:
        wait_for(lambda: starts.exists(), 30, "the worker's first start")

        def crashed() -> bool:
            children[:] = psutil.Process(proc.pid).children(recursive=True)
            return not any(marker in (live_command(c) or "") for c in children)

        wait_for(crashed, 30, "the worker's crash")

    code, err, took = run_then_sigterm(pdir.path, first_crash)
    assert code == 1, err
    assert "did not drain within drain_timeout (1s)" in err, err
    assert starts.read_text().splitlines() == ["start"], err
    assert f"{crashing} stopped by the pipeline before it finished" in err, err
    assert took > 5, took  # the sink had its stop sequence: stdin closed, 5 s, SIGTERM
    _, alive = psutil.wait_procs(children, timeout=5)
    assert not alive, [p.cmdline() for p in alive]
