"""A T-worker that dies just after an answer whose results are still waiting for room
downstream: the answered job is held before its results go on, so the failure finds it
and sends it again (docs/protocol.md: *Answers in step*). Nothing is lost; a
deterministic T's re-answer, equal to what went on, is not handed on twice."""

from __future__ import annotations

from collections import Counter

import pytest

from tests.support.engines import Engine

pytestmark = pytest.mark.timeout(300)

N = 400

# Worker-driven batches of 10; the first process answers its 5th batch and is gone 50 ms
# later (a timer, so the answer is written first), while the loader's inbox is full.
ANSWER_THEN_EXIT = """\
import os, sys, threading
from pathlib import Path
from etlstage.worker import run_transformer
flag = Path(sys.argv[1])
batches = 0
def f(ms):
    global batches
    batches += 1
    if batches == 5 and not flag.exists():
        flag.touch()
        threading.Timer(0.05, os._exit, (9,)).start()
    return ms
run_transformer(f)
"""

SLOW_APPEND = """\
import os, sys, time
from etlstage.worker import run_loader
def load(ms):
    time.sleep(0.15)
    with open(sys.argv[1], "ab") as f:
        f.write(b"".join(m + b"\\n" for m in ms))
        f.flush()
        os.fsync(f.fileno())
run_loader(load)
"""


def test_an_answer_waiting_for_room_when_its_worker_dies_is_sent_again_not_lost(engine: Engine) -> None:
    (engine.tmp / "t.py").write_text(ANSWER_THEN_EXIT)
    (engine.tmp / "l.py").write_text(SLOW_APPEND)
    code, log = engine.run(
        f"""
buffer_bytes: 64
stages:
  - {{name: src, type: E, command: ["{{PY}}", "{{TW}}", count, "{N}"]}}
  - {{name: t, type: T, mode: batch, batch_size: 10, batch_driver: worker,
     restart: {{max_restarts: 3, backoff: 0.05}}, command: ["{{PY}}", "t.py", "{engine.tmp}/died"]}}
  - {{name: sink, type: L, mode: batch, batch_size: 10, command: ["{{PY}}", "l.py", "out.txt"]}}
"""
    )
    assert code == 0, log[-3000:]
    assert (engine.tmp / "died").exists(), "the T-worker never took its 5th batch"
    got = Counter(engine.lines("out.txt"))
    missing = [str(i) for i in range(N) if str(i) not in got]
    assert not missing, f"{len(missing)} lost, e.g. {missing[:10]}\n{log[-3000:]}"
    assert set(got.values()) == {1}, sorted((m for m, n in got.items() if n > 1), key=int)[:20]
    assert "unlike its earlier answer" not in log, "an answer cut short is no earlier answer\n" + log[-3000:]
