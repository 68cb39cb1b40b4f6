"""A keyed stage's worker moves between Spark Python processes running, not restarted.

Two real OS processes play two of Spark's Python processes on one host: the holder owns
(run, stage, partition) and runs the worker (``cat``); the test process asks for the
partition, receives the worker's pipes and talks to the same process.
"""

from __future__ import annotations

import collections
import contextlib
import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import textwrap
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from etlstage.errors import StateError
from etlstage.spark.tasks.ownership import Ownership, Rendezvous, lock_root, retire
from etlstage.spark.tasks.process import WorkerProcess

pytestmark = pytest.mark.timeout(60)

HOLDER = textwrap.dedent(
    """
    import sys, time
    import etlstage.spark.tasks.process as process
    from etlstage.spark.tasks.ownership import Ownership

    process.WATCHDOG_GRACE = 0.3  # this process's watchdog would kill its workers 0.3 s after it dies
    run_id, mode = sys.argv[1], sys.argv[2]
    ownership = Ownership(run_id, "keyed", 0)
    ownership.acquire(10, "keyed")
    worker = process.WorkerProcess(["cat"], {"PATH": "/usr/bin:/bin"}, None, "keyed")
    print(worker.pid, flush=True)
    while not ownership.asked:
        time.sleep(0.01)
    if mode == "hand over":
        print("handed" if worker.hand_over(ownership.address) else "kept", flush=True)
    else:
        worker.stop(5.0)
        print("stopped", flush=True)
    ownership.release()
    time.sleep(60)
    """
)


@contextlib.contextmanager
def holder(mode: str) -> Iterator[tuple[Ownership, subprocess.Popen[str], int]]:
    """A first owner running ``cat`` for (run, "keyed", 0); ours, the second Ownership, asks
    for the partition (not yet acquired). Everything is killed at the end."""
    run_id = f"test-{uuid.uuid4().hex}"
    first = subprocess.Popen(
        [sys.executable, "-c", HOLDER, run_id, mode], stdout=subprocess.PIPE, text=True, start_new_session=True
    )
    assert first.stdout is not None
    pid = int(first.stdout.readline())
    try:
        yield Ownership(run_id, "keyed", 0), first, pid
    finally:
        first.kill()
        first.wait(5)
        if psutil.pid_exists(pid):
            os.kill(pid, signal.SIGKILL)


def said(first: subprocess.Popen[str]) -> str:
    assert first.stdout is not None
    return first.stdout.readline().strip()


def echo(worker: WorkerProcess, data: bytes) -> bytes:
    pending = collections.deque([memoryview(data)])
    got = b""
    deadline = time.monotonic() + 10
    while len(got) < len(data):
        got += b"".join(worker.pump(pending, deadline, "echo"))
    return got


def test_the_running_worker_is_handed_over_and_outlives_its_first_owner() -> None:
    with holder("hand over") as (ownership, first, pid):
        ownership.acquire(10, "keyed")
        assert said(first) == "handed"
        assert ownership.handed is not None and ownership.handed.pid == pid
        worker = WorkerProcess(["cat"], {}, None, "keyed", ownership.handed)
        assert worker.pid == pid  # the same process: no restart
        assert echo(worker, b"one\n") == b"one\n"
        # the first owner dies: its watchdog must not take the worker with it
        (watchdog,) = [
            p for p in psutil.Process(first.pid).children() if "etlstage.spark.tasks.watchdog" in " ".join(p.cmdline())
        ]
        first.send_signal(signal.SIGKILL)
        first.wait(5)
        watchdog.wait(10)  # it has killed whatever it still watched, and exited
        assert psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
        assert echo(worker, b"two\n") == b"two\n"
        assert worker.stop(5.0) is not None  # stdin closed: cat ends; its status is not ours to read
        assert worker.proc.poll() is not None
        assert "unknown" in worker.status()
        ownership.release()


def test_an_owner_that_stops_its_worker_hands_nothing_over() -> None:
    """The fallback: the worker stopped and the lock released, the new owner starts afresh."""
    with holder("stop") as (ownership, first, pid):
        ownership.acquire(10, "keyed")
        assert said(first) == "stopped"
        assert ownership.handed is None
        assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
        ownership.release()


# --- another user on the host -------------------------------------------------------------------

as_root = pytest.mark.skipif(os.geteuid() != 0, reason="runs the attacker as user nobody: needs root")

# The attacker, run as user nobody with the system's Python (standard library only).
ATTACK = textwrap.dedent(
    r"""
    import json, os, socket, sys, time
    mode, target, seconds = sys.argv[1], sys.argv[2], float(sys.argv[3])
    addr = bytes.fromhex(target) if mode.endswith("abstract") else target
    deadline = time.monotonic() + seconds
    if mode.startswith("connect"):  # be the sender: hand the listener our own pipes as "the worker"
        r, w = os.pipe()
        note = json.dumps({"pid": int(sys.argv[4]), "create_time": float(sys.argv[5]), "tail": []}).encode()
        print("ready", flush=True)
        err = None
        while time.monotonic() < deadline:
            s = socket.socket(socket.AF_UNIX)
            try:
                s.connect(addr)
                socket.send_fds(s, [note], [w, r, w])
                print("sent", flush=True)
                break
            except OSError as exc:
                err = exc
            finally:
                s.close()
            time.sleep(0.001)
        else:
            print(f"refused: {err}", flush=True)
    else:  # be the listener: receive the real worker's pipes
        s = socket.socket(socket.AF_UNIX)
        try:
            s.bind(addr)
            s.listen(1)
        except OSError as exc:
            print(f"refused: {exc}", flush=True)
            sys.exit()
        print("bound", flush=True)
        s.settimeout(seconds)
        try:
            c, _ = s.accept()
            _, fds, _, _ = socket.recv_fds(c, 1 << 20, 3)
            print(f"received {len(fds)} descriptors" if fds else "nothing came", flush=True)
        except OSError:
            print("nothing came", flush=True)
    """
)


def as_nobody(*args: object, user: str = "nobody") -> subprocess.Popen[str]:
    """The attacker as ``user`` (``root``: a process of our own user, but not the expected one)."""
    setpriv = ["setpriv", f"--reuid={user}", "--regid=nogroup", "--clear-groups"] if user != "root" else []
    return subprocess.Popen(
        [*setpriv, "/usr/bin/python3", "-I", "-c", ATTACK, *(str(a) for a in args)], stdout=subprocess.PIPE, text=True
    )


def rendezvous(ownership: Ownership, mode: str) -> tuple[str, str]:
    """(mode, target) for the attacker: the hand-over socket, wherever this version puts it."""
    path = getattr(ownership, "socket_path", None)
    if path is not None:
        return mode, str(path)
    return f"{mode}-abstract", bytes(ownership.address).hex()  # type: ignore[arg-type]


@as_root
def test_another_user_cannot_hand_a_new_owner_fake_worker_pipes() -> None:
    with holder("hand over") as (ownership, first, pid):
        mode, target = rendezvous(ownership, "connect")
        attacker = as_nobody(mode, target, 3.0, pid, psutil.Process(pid).create_time())
        assert attacker.stdout is not None and attacker.stdout.readline().strip() == "ready"
        ownership.acquire(10, "keyed")
        assert said(first) == "handed"
        out, _ = attacker.communicate(timeout=20)
        assert "sent" not in out, out
        assert ownership.handed is not None and ownership.handed.pid == pid
        worker = WorkerProcess(["cat"], {}, None, "keyed", ownership.handed)
        assert echo(worker, b"one\n") == b"one\n"  # the real worker's pipes
        worker.stop(5.0)
        ownership.release()


@as_root
def test_another_user_cannot_take_the_place_of_the_new_owner() -> None:
    with holder("hand over") as (ownership, first, pid):
        mode, target = rendezvous(ownership, "listen")
        attacker = as_nobody(mode, target, 3.0)
        assert attacker.stdout is not None
        first_line = attacker.stdout.readline()  # bound (or refused) before the new owner listens
        ownership.acquire(10, "keyed")
        assert said(first) == "handed"
        out, _ = attacker.communicate(timeout=20)
        assert "received" not in first_line + out, first_line + out
        assert ownership.handed is not None and ownership.handed.pid == pid
        worker = WorkerProcess(["cat"], {}, None, "keyed", ownership.handed)
        assert echo(worker, b"one\n") == b"one\n"
        worker.stop(5.0)
        ownership.release()


@pytest.fixture
def open_folder() -> Iterator[Path]:
    """A folder anyone may enter and write: the peer checks alone stand between the users."""
    folder = Path(tempfile.mkdtemp(dir="/tmp", prefix="etlstage-test-"))
    os.chmod(folder, 0o1777)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@as_root
def test_a_new_owner_refuses_pipes_from_a_process_that_is_not_the_owner(open_folder: Path) -> None:
    path = open_folder / "h.sock"
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(path))
    listener.listen(1)
    os.chmod(path, 0o777)
    cat = subprocess.Popen(["cat"], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        attacker = as_nobody("connect", path, 5.0, cat.pid, psutil.Process(cat.pid).create_time())
        out, _ = attacker.communicate(timeout=20)
        assert "sent" in out, out  # it got through: only the check of the peer is left
        assert Ownership._receive(listener, attacker.pid) is None  # another user: refused
        other = as_nobody("connect", path, 5.0, cat.pid, psutil.Process(cat.pid).create_time(), user="root")
        other.communicate(timeout=20)
        assert Ownership._receive(listener, os.getpid()) is None  # our user, but not the pid that owns the lock
    finally:
        listener.close()
        cat.kill()
        cat.wait()


@as_root
def test_an_owner_hands_its_worker_only_to_the_process_that_asked(open_folder: Path) -> None:
    path = open_folder / "h.sock"
    attacker = as_nobody("listen", path, 5.0)
    assert attacker.stdout is not None and attacker.stdout.readline().strip() == "bound"
    worker = WorkerProcess(["cat"], {"PATH": "/usr/bin:/bin"}, None, "keyed")
    try:
        assert not worker.hand_over(Rendezvous(str(path), attacker.pid))  # right pid, another user
        assert not worker.hand_over(Rendezvous(str(path), None))  # nobody asked
        out, _ = attacker.communicate(timeout=20)
        assert "received" not in out, out
        path.unlink()
        other = as_nobody("listen", path, 5.0, user="root")
        assert other.stdout is not None and other.stdout.readline().strip() == "bound"
        assert not worker.hand_over(Rendezvous(str(path), os.getpid()))  # our user, but not the pid that asked
        out, _ = other.communicate(timeout=20)
        assert "received" not in out, out
        assert echo(worker, b"still ours\n") == b"still ours\n"
    finally:
        worker.stop(5.0)


@as_root
def test_a_lock_folder_planted_by_another_user_is_not_used(open_folder: Path, monkeypatch, tmp_path: Path) -> None:
    """Another user made ``etlstage-0/`` first (a link inside, to a victim): each process
    falls back to a private folder of its user's, and the planted one is never written."""
    victim = open_folder / "victim"
    victim.write_text("precious")
    run_id = f"test-{uuid.uuid4().hex}"
    plant = (
        "import os, sys; d = os.path.join(sys.argv[1], 'etlstage-0', 'owners', sys.argv[2]); "
        "os.makedirs(d, mode=0o777); os.symlink(sys.argv[3], os.path.join(d, 'keyed-0.lock'))"
    )
    subprocess.run(
        ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", "/usr/bin/python3", "-I", "-c", plant,
         str(open_folder), run_id, str(victim)],
        check=True,
    )  # fmt: skip
    monkeypatch.setattr(tempfile, "tempdir", str(open_folder))
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("XDG_RUNTIME_DIR", "")
    monkeypatch.setenv("ETLSTAGE_LOCK_BASE", "")
    ownership = Ownership(run_id, "keyed", 0)
    ownership.acquire(5, "keyed")
    ownership.record(os.getpid())
    ownership.release()
    retire(run_id)
    assert ownership.path.is_relative_to(tmp_path / ".cache" / "etlstage"), ownership.path
    assert victim.read_text() == "precious"


def test_the_lock_folder_is_owner_only_and_no_link_is_followed(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    (tmp_path / f"etlstage-{os.getuid()}").mkdir(mode=0o755)  # ours, but too open: made 0700
    ownership = Ownership("run", "keyed", 0)
    ownership.acquire(5, "keyed")
    ownership.release()
    for level in (lock_root().parent, lock_root(), lock_root() / "run"):
        assert stat.S_IMODE(level.lstat().st_mode) == 0o700, level
    assert stat.S_IMODE(ownership.path.lstat().st_mode) == 0o600
    ownership.path.unlink()
    (tmp_path / "elsewhere").write_text("kept")
    ownership.path.symlink_to(tmp_path / "elsewhere")
    with pytest.raises(StateError, match="symbolic link"):
        ownership.acquire(5, "keyed")
    assert (tmp_path / "elsewhere").read_text() == "kept"


def test_a_stopped_worker_lets_go_of_its_partition_at_once(tmp_path: Path) -> None:
    """A keyed stage's worker stopped in one Spark Python process (its task failed, the run
    retired it): the next process to run that partition takes it at once, and finds no
    worker it must wait for."""
    from tests.core.spark.test_spark_conversation import t_worker

    run_id = f"test-{uuid.uuid4().hex}"
    first = Ownership(run_id, "t", 0)
    first.acquire(5.0, "t")
    worker = t_worker(tmp_path, ["cat"])
    worker.ownership = first
    pid = worker._ensure().pid
    worker.stop(5.0)
    assert worker.ownership is None
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    second = Ownership(run_id, "t", 0)
    started = time.monotonic()
    second.acquire(3.0, "t")  # raises after 3 s if the first still held the lock
    assert time.monotonic() - started < 1.0 and second.handed is None
    second.release()
