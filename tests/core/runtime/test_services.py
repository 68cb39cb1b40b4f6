"""Services: programs started before the stages."""

from __future__ import annotations

CHATTY = """
import sys, time
print("GREETING=hello", flush=True)
print("READY", flush=True)
for _ in range(200):  # 20 MB: far more than a pipe holds, after READY
    sys.stdout.write("x" * 99_999 + "\\\\n")
sys.stdout.flush()
open("chatty-done", "w").close()
time.sleep(60)
"""

WAIT_FOR_IT = """
import os, sys, time
deadline = time.time() + 20
while not os.path.exists("chatty-done") and time.time() < deadline:
    time.sleep(0.05)
print(os.environ["GREETING"] if os.path.exists("chatty-done") else "blocked")
"""


def test_a_service_that_keeps_writing_after_ready_is_not_blocked(pdir):
    (pdir.path / "chatty.py").write_text(CHATTY)
    (pdir.path / "wait.py").write_text(WAIT_FOR_IT)
    pdir.write("""
        services:
          - {name: chatty, command: ["{PY}", chatty.py]}
        stages:
          - {name: src, type: E, command: ["{PY}", wait.py]}
          - {name: sink, type: L, command: ["{PY}", "{TW}", append, out.txt]}
    """)
    r = pdir.run("--once", timeout=90)
    assert r.code == 0, r.stderr[-2000:]
    assert pdir.lines("out.txt") == ["hello"]


def test_a_preparation_service_that_exits_is_waited_for_and_released(pdir):
    (pdir.path / "prep.py").write_text("open('prepared', 'w').write('ok')\nprint('prepared it')\n")
    pdir.write("""
        services:
          - {name: prep, ready: exit, command: ["{PY}", prep.py]}
        stages:
          - {name: src, type: E, command: ["{PY}", "-c", "print(open('prepared').read())"]}
          - {name: sink, type: L, command: ["{PY}", "{TW}", append, out.txt]}
    """)
    # Python's development mode reports a subprocess transport left open as a ResourceWarning
    r = pdir.etlstage("run", "stages.yaml", "--once", "--no-progress", env={"PYTHONDEVMODE": "1"}, timeout=60)
    assert r.code == 0, r.stderr[-2000:]
    assert pdir.lines("out.txt") == ["ok"]
    own = [line for line in r.stderr.splitlines() if "etlstage.worker: [" not in line]  # not the workers' lines
    assert not [line for line in own if "unclosed" in line], own
