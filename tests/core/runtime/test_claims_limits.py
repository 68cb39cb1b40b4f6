"""Documented limits that a test must catch when broken: batch_bytes closes a batch as it is
assembled; replay_bytes makes the sender wait for answers; windows commit in order."""

from __future__ import annotations

import json
import sqlite3
import sys
from pathlib import Path

import pytest

from etlstage.config.loader import parse_config
from etlstage.runtime.pipeline import Pipeline, Source
from tests.support.live_run import LiveRun
from tests.support.paths import FIXTURES
from tests.support.waiting import stays, wait_for

LOOKAHEAD = str(FIXTURES / "lookahead.py")
BIG = "import sys; [sys.stdout.write('x' * 100000 + chr(10)) for _ in range(40)]"


def test_batch_bytes_closes_each_batch_the_worker_sees(pdir):
    """40 messages of 100 kB, batch_size 100, batch_bytes 1 MiB: the L-worker gets batches of at
    most 10 messages (11 would be 1.1 MB), and all 40 arrive."""
    pdir.write(f"""
        stages:
          - {{name: big, type: E, command: ["{{PY}}", "-c", "{BIG}"]}}
          - {{name: sink, type: L, mode: batch, batch_size: 100, batch_bytes: 1MiB,
             command: ["{{PY}}", "{{TW}}", batches, batches.jsonl]}}
    """)
    r = pdir.run("--once")
    assert r.code == 0, r.stderr
    sizes = [len(json.loads(line)) for line in pdir.lines("batches.jsonl")]
    assert sum(sizes) == 40
    assert max(sizes) == 10, sizes  # the byte limit, not batch_size, closed them
    assert all(sum(len(m) + 1 for m in json.loads(line)) <= 1 << 20 for line in pdir.lines("batches.jsonl"))


def _lookahead_run(pdir, replay: str) -> list[str]:
    pdir.write(f"""
        stages:
          - {{name: numbers, type: E, command: ["{{PY}}", "{{TW}}", count, "8"]}}
          - {{name: t, type: T, mode: batch, batch_size: 1, {replay}
             command: ["{{PY}}", "{LOOKAHEAD}", seen.txt]}}
          - {{name: sink, type: L, command: ["{{PY}}", "{{TW}}", append, out.txt]}}
    """)
    r = pdir.run("--once")
    assert r.code == 0, r.stderr
    assert sorted(pdir.lines("out.txt"), key=int) == [str(i) for i in range(8)]
    return pdir.lines("seen.txt")


def test_replay_bytes_makes_the_sender_wait_for_each_answer(pdir):
    """replay_bytes below one batch: a batch is written only once the one before is answered,
    so the worker never finds the next batch waiting (by default it does: two jobs in flight)."""
    assert set(_lookahead_run(pdir, "replay_bytes: 16,")) == {"alone"}


def test_without_the_limit_the_next_batch_is_written_ahead(pdir):
    """The control of the test above: the worker does see a batch written ahead when the
    limit does not bind, so `alone` above is the limit's doing."""
    assert "ahead" in _lookahead_run(pdir, "")


def _pipeline(tmp_path: Path) -> Pipeline:
    text = f"""
state_dir: {tmp_path / "state"}
stages:
  - {{name: e, type: E, mode: cyclic, offsets: supervisor, offset_policy: {{type: counter, start: 0, step: 10}},
     command: ["{sys.executable}", "-c", "pass"]}}
  - {{name: sink, type: L, command: ["{sys.executable}", "-c", "pass"]}}
"""
    return Pipeline(parse_config(text, base_dir=str(tmp_path)))


def test_windows_commit_in_order_when_a_later_one_finishes_first(tmp_path):
    """Window 1 done while window 0 still has a message at the L level: nothing is committed;
    once window 0 is done both are, and the checkpoint is window 1's end."""
    p = _pipeline(tmp_path)
    p.sources["e"] = Source("e", p.config.stages[0])
    w0 = p.open_window("e", b'{"start":0,"end":10}')
    w1 = p.open_window("e", b'{"start":10,"end":20}')
    for w in (w0, w1):
        w.add(1, 1)
        w.close()
    w1.release(1, 1)
    assert w1.done and not w0.done
    assert p.store.committed("e") == (None, 0)  # window 1's end must wait for window 0
    w0.release(1, 1)
    assert p.store.committed("e") == (20, 2)
    p.store.close()


def test_answers_let_go_beyond_replay_bytes_still_release_their_windows(pdir):
    """replay_bytes below one batch: each answered batch but the newest lets its input go
    while unconfirmed, keeping only the hold on its window. Once the worker is confirmed in
    step those holds must go too, or the window never commits (and with worker-managed
    offsets the next cycle is never asked for)."""
    pdir.write("""
        stages:
          - {name: numbers, type: E, mode: cyclic, command: ["{PY}", "{TW}", count, "30", "10"]}
          - {name: t, type: T, mode: batch, batch_size: 2, replay_bytes: 16, command: ["{PY}", "{TW}", upper]}
          - {name: sink, type: L, command: ["{PY}", "{TW}", append, out.txt]}
    """)
    r = pdir.run("--once", timeout=60)
    assert r.code == 0, r.stderr
    assert sorted(pdir.lines("out.txt"), key=int) == [str(i) for i in range(30)]
    db = sqlite3.connect(pdir.path / ".etlstage/stages/state.db")
    assert db.execute("SELECT window_seq, messages FROM checkpoints").fetchall() == [(4, 30)]  # 3 windows + 1 empty


MISBEHAVE = str(FIXTURES / "misbehave.py")


@pytest.mark.parametrize(
    "fault, code, said",
    [
        ("crash@6", 0, "exited with requests unanswered"),
        ("stray@6", 1, "broke the protocol after answering more than replay_bytes (16 bytes)"),
    ],
)
def test_past_replay_bytes_a_crash_sends_again_what_was_kept_but_a_violation_stops_the_stage(pdir, fault, code, said):
    """docs/protocol.md: once a worker's unconfirmed answers have let their input go (past
    ``replay_bytes``; a plain extractor's one window holds them all), a crash or time-out
    sends again what was kept and goes on, but a protocol violation, whose answers may be
    on the wrong requests, stops the stage with nothing committed."""
    (pdir.path / "flags").mkdir()
    pdir.write(f"""
        stages:
          - {{name: numbers, type: E, command: ["{{PY}}", "{{TW}}", count, "40"]}}
          - {{name: t, type: T, mode: batch, batch_size: 2, replay_bytes: 16,
             restart: {{max_restarts: 2, backoff: 0.05}}, command: ["{{PY}}", "{MISBEHAVE}", flags, "{fault}"]}}
          - {{name: sink, type: L, command: ["{{PY}}", "{{TW}}", append, out.txt]}}
    """)
    r = pdir.run("--once", timeout=60)
    assert r.code == code, r.stderr
    assert said in r.stderr, r.stderr
    if code == 0:
        assert sorted(set(pdir.lines("out.txt")), key=int) == [str(i) for i in range(40)]
    else:
        db = sqlite3.connect(pdir.path / ".etlstage/stages/state.db")
        assert db.execute("SELECT count(*) FROM checkpoints").fetchone() == (0,)  # the next run extracts it all


# a cyclic E-worker: notes each request; one message for each of its first three, then none
NOTING = (
    "import os, sys\n"
    "for _ in sys.stdin.buffer:\n"
    "    with open('requests.txt', 'a') as f:\n"
    "        f.write('r' + chr(10))\n"
    "    n = len(open('requests.txt').readlines())\n"
    "    os.write(1, (b'%d' % n + bytes([10]) if n <= 3 else b'') + bytes([0]))\n"
)
GATED_SINK = (
    """["sh", "-c", 'while [ ! -e go ]; do sleep 0.05; done; exec "$$0" "$$@"', "{PY}", "{TW}", append, out.txt]"""
)


@pytest.mark.parametrize(
    ("offsets", "ahead"),
    [("offsets: worker", 1), ("offsets: supervisor, offset_policy: {type: counter, start: 0, step: 1}", 3)],
)
def test_an_extractor_is_asked_ahead_of_commits_only_as_far_as_its_offsets_allow(pdir, tmp_path, offsets, ahead):
    """docs/protocol.md: with its own offsets an extractor is sent its next request only once
    the previous window is done; with the supervisor's, up to ``max_inflight_windows`` run
    ahead of commits (3 here). The sink starts only once allowed, so nothing commits before."""
    script = tmp_path / "noting.py"
    script.write_text(NOTING)
    pdir.write(f"""
        max_inflight_windows: 3
        stages:
          - {{name: src, type: E, mode: cyclic, {offsets}, command: ["{{PY}}", "{script}"]}}
          - {{name: sink, type: L, command: {GATED_SINK}}}
    """)
    with LiveRun(pdir.path, "--once") as run:
        requests = pdir.path / "requests.txt"
        asked = lambda: len(requests.read_text().splitlines()) if requests.exists() else 0  # noqa: E731
        wait_for(lambda: asked() == ahead, 30, f"{ahead} request(s)")
        assert stays(lambda: asked() == ahead, 1.5), asked()  # no more until a window commits
        (pdir.path / "go").touch()
        assert run.proc.wait(timeout=60) == 0, run.stderr
    assert sorted(pdir.lines("out.txt"), key=int) == ["1", "2", "3"]
