"""Services: programs started before the stages."""

from __future__ import annotations

import asyncio
import sys

import pytest

from etlstage.config.model import ServiceConfig
from etlstage.errors import PipelineError
from etlstage.kit.services import Services
from tests.support.sigterm import run_then_sigterm
from tests.support.waiting import wait_for

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


def test_a_preparation_service_that_overruns_its_timeout_is_stopped(tmp_path):
    """Start-up fails naming the service, and the service is not left running behind it
    (in-process: the supervisor lives on, so dying with it proves nothing)."""
    (tmp_path / "slow.py").write_text("import os, time\nopen('pid', 'w').write(str(os.getpid()))\ntime.sleep(60)\n")
    prep = ServiceConfig("prep", [sys.executable, "slow.py"], ready="exit", timeout=1)
    with pytest.raises(PipelineError, match="prep.*was not ready within 1s"):
        asyncio.run(Services([prep], str(tmp_path)).start({}))
    pid = int((tmp_path / "pid").read_text())
    assert not _alive(pid), f"service prep (pid {pid}) still runs after start-up failed"


def _alive(pid: int) -> bool:
    """Running, not a zombie waiting for its parent to reap it."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


@pytest.mark.parametrize(
    ("script", "shown"),
    [
        ("import sys\nprint('bucket missing', file=sys.stderr)\nsys.exit(3)\n", "  | bucket missing"),
        ("import sys\nsys.exit(3)\n", "  (no stderr)"),
    ],
    ids=["with-stderr", "silent"],
)
def test_a_service_that_fails_is_named_with_its_last_stderr_lines(tmp_path, script, shown):
    """What the service said before it failed is in the error; a silent one says so."""
    (tmp_path / "fail.py").write_text(script)
    prep = ServiceConfig("prep", [sys.executable, "fail.py"], ready="exit", timeout=20)
    with pytest.raises(PipelineError) as failed:
        asyncio.run(Services([prep], str(tmp_path)).start({}))
    text = str(failed.value)
    assert "service 'prep'" in text and text.rstrip().endswith(shown), text


def test_a_stop_whose_drain_times_out_while_a_service_starts_ends_cleanly(pdir):
    """SIGTERM while a service is still getting ready, then the drain timeout: exit 1 with
    the drain message (no stage has started, so there is no worker to stop), not an
    internal error; the service is stopped."""
    (pdir.path / "slow.py").write_text("import os, time\nopen('pid', 'w').write(str(os.getpid()))\ntime.sleep(60)\n")
    pdir.write("""
        drain_timeout: 0.5
        services:
          - {name: prep, ready: exit, timeout: 120, command: ["{PY}", slow.py]}
        stages:
          - {name: src, type: E, command: ["{PY}", "{TW}", count, "3"]}
          - {name: sink, type: L, command: ["{PY}", "{TW}", append, out.txt]}
    """)

    def service_up(_: object) -> None:
        wait_for(lambda: (pdir.path / "pid").exists() and (pdir.path / "pid").read_text(), 30, "the service")

    code, stderr, _ = run_then_sigterm(pdir.path, service_up, within=30)
    pid = int((pdir.path / "pid").read_text())
    assert code == 1, stderr
    assert "did not drain within drain_timeout" in stderr, stderr
    assert "internal error" not in stderr and "Traceback" not in stderr, stderr
    assert not (pdir.path / "out.txt").exists()
    wait_for(lambda: not _alive(pid), 10, "the service's end")
