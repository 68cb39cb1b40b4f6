"""`etlstage tap`: the messages leaving a stage of a running pipeline, live; a slow tap
drops (and says how many) and never slows the pipeline; only the pipeline's user reaches it."""

from __future__ import annotations

import asyncio
import json
import os
import re
import stat
import subprocess
import sys

import pytest

from etlstage.config.loader import load_config
from etlstage.errors import ConfigError, EtlstageError
from etlstage.protocol.markers import DEFAULT_MARKERS
from etlstage.runtime.tap import _Tap, connect, read_taps, socket_path
from tests.support.live_run import LiveRun
from tests.support.waiting import wait_for

FOREVER = """
    name: tapped
    stages:
      - {name: src, type: E, mode: cyclic, poll_interval: 0.2, command: ["{PY}", "{TW}", count, "100000000", "50"]}
      - {name: mark, type: T, mode: batch, batch_size: 10, command: ["{PY}", "{TW}", mark]}
      - {name: sink, type: L, mode: batch, batch_size: 20, command: ["{PY}", "{TW}", append, out.txt]}
"""


def _listening(pdir) -> None:
    path = socket_path(load_config(pdir.path / "stages.yaml"))
    wait_for(path.exists, 30, "the pipeline's tap socket")


def test_tap_shows_what_each_stage_emits_and_what_a_loader_is_given(pdir):
    pdir.write(FOREVER)
    with LiveRun(pdir.path) as run:
        _listening(pdir)
        src = pdir.etlstage("tap", "src", "--limit", "5", timeout=60)
        mark = pdir.etlstage("tap", "stages.yaml", "mark", "--limit", "5", timeout=60)
        sink = pdir.etlstage("tap", "sink", "--limit", "3", "--json", timeout=60)
        assert run.stop() == 0, run.stderr
    for r in (src, mark, sink):
        assert r.code == 0, r.stderr
    assert all(re.fullmatch(r"\d+", line) for line in src.stdout.splitlines()), src.stdout
    assert len(src.stdout.splitlines()) == 5
    assert all(re.fullmatch(r"\d+ @0", line) for line in mark.stdout.splitlines()), mark.stdout
    docs = [json.loads(line) for line in sink.stdout.splitlines()]
    assert len(docs) == 3 and all(re.fullmatch(r"\d+ @0", d["message"]) for d in docs), docs
    assert "the messages given to it" in sink.stderr and "the messages it emits" in mark.stderr
    # the socket lives in the pipeline's owner-only state folder, 0600, and is gone after the run
    path = socket_path(load_config(pdir.path / "stages.yaml"))
    assert not path.exists()
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700


N = 150_000
GATED = f"""
    name: gated
    stages:
      - name: src
        type: E
        mode: plain
        # starts extracting once the file "go" exists, so the tap is open before the first message
        command: ["sh", "-c", 'while [ ! -e go ]; do sleep 0.05; done; exec "$$0" "$$@"', "{{PY}}", "{{TW}}", count, "{N}"]
      - {{name: sink, type: L, mode: batch, batch_size: 500, command: ["{{PY}}", "{{TW}}", append, out.txt]}}
"""


def test_a_tap_that_never_reads_drops_counts_what_it_dropped_and_never_slows_the_run(pdir):
    pdir.write(GATED)
    with LiveRun(pdir.path, "--once") as run:
        _listening(pdir)
        config = load_config(pdir.path / "stages.yaml")
        stream, answer = connect(config, "src")
        assert answer == {"ok": True, "stage": "src", "type": "E"}
        assert stat.S_IMODE(socket_path(config).stat().st_mode) == 0o600
        (pdir.path / "go").touch()
        # nothing read from the tap meanwhile: the pipeline loads everything all the same
        wait_for(lambda: (pdir.path / "out.txt").exists() and len(pdir.lines("out.txt")) == N, 120, "all loaded")
        docs = list(read_taps(stream))  # read now: the ending run gives the tap a moment to take the rest
        assert run.proc.wait(timeout=60) == 0, run.stderr
    assert docs[-1] == {"end": "the pipeline ended"}
    received = sum(1 for d in docs if "message" in d)
    dropped = max((int(d["dropped"]) for d in docs if "dropped" in d), default=0)
    assert dropped > 0, "the tap's buffer should have overflowed"
    totals = [int(d["dropped"]) for d in docs if "dropped" in d]
    assert totals == sorted(set(totals)), totals  # each total said once, when it grew
    assert received + dropped == N  # every message extracted was shown or counted as dropped
    shown = [int(d["message"]) for d in docs if "message" in d]
    assert shown == sorted(shown) and shown[0] == 0  # in order, from the first


def test_tap_refuses_an_unknown_stage_a_pipeline_not_running_and_the_spark_engine(pdir):
    pdir.write(FOREVER)
    r = pdir.etlstage("tap", "nope")
    assert r.code == 2 and "no stage 'nope' in stages.yaml (its stages: src, mark, sink)" in r.stderr, r.stderr
    r = pdir.etlstage("tap", "src")
    assert r.code == 1 and "no running pipeline 'tapped' to tap" in r.stderr, r.stderr
    pdir.write(FOREVER.replace("name: tapped", "name: tapped\n    engine: {kind: spark}"))
    r = pdir.etlstage("tap", "src")
    assert r.code == 2 and "runs on the Spark engine" in r.stderr and "--engine supervisor" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr


def test_a_stage_the_running_pipeline_lacks_is_refused_by_it_and_the_connection_closed(pdir):
    """The file changed since the run started (a stage added): the running pipeline refuses
    the tap naming its own stages, and the client has closed its end by the time the error
    reaches the caller (no descriptor held while the error is)."""
    pdir.write(FOREVER)
    with LiveRun(pdir.path):
        _listening(pdir)
        config = load_config(pdir.path / "stages.yaml")
        before = set(os.listdir("/proc/self/fd"))
        with pytest.raises(
            ConfigError, match=r"no stage 'later' in this pipeline \(its stages: src, mark, sink\)"
        ) as e:
            connect(config, "later")
        left = set(os.listdir("/proc/self/fd")) - before  # while the error (and its traceback) lives
        assert e.value is not None
        assert not left, [os.readlink(f"/proc/self/fd/{fd}") for fd in left if os.path.exists(f"/proc/self/fd/{fd}")]


def test_a_tap_whose_client_leaves_is_closed_and_the_next_one_opens(pdir):
    """A client that goes away ends its tap: the pipeline says so (with what it dropped
    for it) and offers it nothing more; another tap on the same stage opens as usual."""
    pdir.write(FOREVER)
    with LiveRun(pdir.path) as run:
        _listening(pdir)
        config = load_config(pdir.path / "stages.yaml")
        stream, _ = connect(config, "mark")
        first = next(d for d in read_taps(stream) if "message" in d)
        stream.close()
        wait_for(lambda: "tap on stage 'mark' closed" in run.stderr, 30, "the tap's end in the log")
        again, answer = connect(config, "mark")
        assert answer["ok"] and any("message" in d for d in read_taps(again))
        again.close()
        wait_for(lambda: run.stderr.count("tap on stage 'mark' closed") == 2, 30, "the second tap's end")
    assert re.fullmatch(r"\d+ @0", str(first["message"])), first


@pytest.mark.skipif(os.getuid() != 0, reason="needs root to act as another user")
def test_another_user_cannot_reach_the_tap(pdir):
    pdir.write(FOREVER)
    with LiveRun(pdir.path) as run:
        _listening(pdir)
        path = socket_path(load_config(pdir.path / "stages.yaml"))
        probe = (
            "import os, socket, sys\n"
            "os.setgid(65534); os.setuid(65534)\n"
            "s = socket.socket(socket.AF_UNIX)\n"
            "try:\n    s.connect(sys.argv[1])\nexcept PermissionError:\n    sys.exit(13)\n"
            "sys.exit(0)\n"
        )
        r = subprocess.run([sys.executable, "-c", probe, str(path)], timeout=30)
        assert run.stop() == 0, run.stderr
    assert r.returncode == 13


def test_something_in_the_way_of_the_socket_costs_the_tap_not_the_run(pdir):
    pdir.write(GATED.replace(f'"{N}"', '"10"'))
    (pdir.path / "go").touch()
    path = socket_path(load_config(pdir.path / "stages.yaml"))
    path.mkdir(parents=True)
    (path / "keep").touch()  # a non-empty folder named tap.sock
    r = pdir.run("--once")
    assert r.code == 0, r.stderr
    assert "no tap for this run" in r.stderr and len(pdir.lines("out.txt")) == 10


def test_a_file_left_where_the_socket_goes_is_replaced(pdir):
    """This run holds the pipeline's state: whatever file an earlier run left at the socket's
    path (a socket, or here a plain file, which asyncio would not remove) gives way to the tap."""
    pdir.write(GATED.replace(f'"{N}"', '"10"'))
    (pdir.path / "go").touch()
    path = socket_path(load_config(pdir.path / "stages.yaml"))
    path.parent.mkdir(parents=True, mode=0o700)
    path.write_text("left behind")
    r = pdir.run("--once")
    assert r.code == 0, r.stderr
    assert "no tap for this run" not in r.stderr, r.stderr
    assert not path.exists()  # the run's socket, removed at its end


def test_a_taps_buffer_holds_64_kib_then_counts_what_it_drops() -> None:
    """docs/operating.md: the tap's buffer is 64 KiB; what does not fit is dropped and counted,
    and a block larger than the buffer still goes through when it is alone."""

    async def scenario() -> tuple[int, int, int]:
        tap = _Tap("src", DEFAULT_MARKERS)
        for _ in range(64):
            tap.offer(b"x" * 1023 + b"\n", 1)  # 64 KiB in all: fits
        tap.offer(b"y\n", 1)  # one byte more: dropped
        held, dropped = len(tap.blocks), tap.dropped
        while tap.blocks:
            tap.take()
        tap.offer(b"z" * (200 * 1024) + b"\n", 1)  # alone: taken however large
        return held, dropped, len(tap.blocks)

    assert asyncio.run(scenario()) == (64, 1, 1)


def test_a_state_folder_too_deep_for_a_socket_is_named_with_the_reason_on_both_sides(pdir):
    """A Unix socket's path holds at most 107 bytes: with a deeper state folder the run goes
    on without a tap, saying so, and `etlstage tap` says the same (not that another user
    serves the run, nor that nothing runs)."""
    deep = pdir.path / ("d" * 60) / ("e" * 60)
    pdir.write(FOREVER.replace("name: tapped", f"name: tapped\n    state_dir: {deep}"))
    path = socket_path(load_config(pdir.path / "stages.yaml"))
    said = f"its socket path {path} is longer than 107 bytes"
    with LiveRun(pdir.path) as run:
        wait_for(lambda: "no tap for this run" in run.stderr, 30, "the run's word on its tap")
        r = pdir.etlstage("tap", "src", timeout=60)
        assert run.stop() == 0, run.stderr
    assert f"no tap for this run: {said}" in run.stderr
    assert r.code == 1, r.stderr
    assert f"pipeline 'tapped' has no tap: {said} (a shorter state_dir gives it one)" in r.stderr, r.stderr


def test_a_tap_that_cannot_reach_the_socket_says_why(pdir):
    """Anything in the way of the socket other than its absence (here the state folder became
    a file after the file was read) is named with the system's reason, not taken for
    another user's process."""
    pdir.write(FOREVER)
    config = load_config(pdir.path / "stages.yaml")
    path = socket_path(config)
    path.parent.parent.mkdir(parents=True)
    path.parent.write_text("not a folder")
    with pytest.raises(EtlstageError) as err:
        connect(config, "src")
    assert str(err.value) == f"cannot reach the running pipeline at {path}: [Errno 20] Not a directory"
