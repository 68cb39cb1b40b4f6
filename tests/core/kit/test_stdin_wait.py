"""Whether a worker's process tree waits for its first request (kit.stdin_wait): every
thread blocked reading its stdin pipe, or waiting for a child; anything else is not."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from etlstage.kit.stdin_wait import waiting_on_stdin
from tests.support.waiting import stays, wait_for

pytestmark = pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="Linux /proc only")


def blocked(pid: int) -> bool:
    """Every thread of ``pid`` is in a system call (not running, not between two)."""
    tasks = list(Path(f"/proc/{pid}/task").iterdir())
    return all((t / "syscall").read_text().split()[0].isdigit() for t in tasks)


@pytest.fixture
def spawn() -> Iterator:
    started: list[subprocess.Popen[bytes]] = []

    def start(*argv: str) -> subprocess.Popen[bytes]:
        p = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        started.append(p)
        return p

    yield start
    for p in started:
        p.kill()
        p.wait()


def test_a_program_reading_its_stdin_waits(spawn) -> None:
    p = spawn("cat")
    wait_for(lambda: waiting_on_stdin(p.pid, p.stdin.fileno()), 10, "cat to block on its stdin")


def test_a_shell_waiting_for_a_child_that_reads_its_stdin_waits(spawn) -> None:
    p = spawn("sh", "-c", "cat; echo done")  # two commands: sh forks cat and waits for it
    wait_for(lambda: waiting_on_stdin(p.pid, p.stdin.fileno()), 10, "sh and cat to block")


def test_a_program_reading_another_pipe_does_not_wait_on_its_stdin(spawn) -> None:
    p = spawn("cat")
    other = spawn("cat")
    wait_for(lambda: blocked(p.pid), 10, "cat to block")
    assert stays(lambda: not waiting_on_stdin(p.pid, other.stdin.fileno()), 0.3)


def test_a_sleeping_program_does_not_wait_on_its_stdin(spawn) -> None:
    p = spawn("sleep", "30")
    wait_for(lambda: blocked(p.pid), 10, "sleep to block")
    assert stays(lambda: not waiting_on_stdin(p.pid, p.stdin.fileno()), 0.3)


def test_one_thread_doing_anything_else_is_enough_to_not_wait(spawn) -> None:
    # the main thread reads its stdin at once; another sleeps, then could write a banner
    code = "import sys, threading, time\nthreading.Thread(target=time.sleep, args=(30,)).start()\nsys.stdin.read()"
    p = spawn(sys.executable, "-c", code)
    wait_for(lambda: len(list(Path(f"/proc/{p.pid}/task").iterdir())) == 2 and blocked(p.pid), 10, "both threads")
    assert stays(lambda: not waiting_on_stdin(p.pid, p.stdin.fileno()), 0.3)


def test_a_process_gone_does_not_wait(spawn) -> None:
    p = spawn("true")
    p.wait()
    assert not waiting_on_stdin(p.pid, p.stdin.fileno())
