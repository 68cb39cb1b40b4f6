"""A worker process's figures (kit.transport): its memory and CPU while it runs, its CPU
seconds for /metrics, measured over the process and its children."""

from __future__ import annotations

import asyncio
import collections
import os
import sys
import time
from pathlib import Path

import pytest

from etlstage.kit.transport import ProcessTransport, _WorkerProtocol

# burns CPU for about 0.3 s, then waits for its stdin to close
BUSY = "import sys, time\nend = time.process_time() + 0.3\nwhile time.process_time() < end: pass\nsys.stdin.read()"


def test_a_running_worker_has_memory_and_cpu_seconds(tmp_path: Path) -> None:
    async def scenario() -> tuple[tuple[int, float] | None, float | None]:
        t = await ProcessTransport.spawn([sys.executable, "-c", BUSY], dict(os.environ), str(tmp_path), "busy")
        try:
            deadline = time.monotonic() + 20
            while (t.cpu_seconds() or 0.0) < 0.25:  # the CPU it burns shows, within a bounded wait
                assert time.monotonic() < deadline, f"cpu seconds stayed {t.cpu_seconds()}"
                await asyncio.sleep(0.05)
            return t.resources(), t.cpu_seconds()
        finally:
            t.kill()
            await t.stop(1, 1)

    used, seconds = asyncio.run(scenario())
    assert used is not None and used[0] > 1_000_000  # a Python interpreter's resident memory
    assert seconds is not None and seconds >= 0.25


def test_reading_a_worker_pauses_only_once_more_than_the_limit_is_buffered() -> None:
    """Backpressure on the worker's stdout: reading stops once more than ``max_buffered``
    bytes wait unread, once (not again at each chunk), and not before."""

    class Pipe(asyncio.ReadTransport):
        pauses = 0

        def pause_reading(self) -> None:
            self.pauses += 1

    class Process:
        def __init__(self) -> None:
            self.pipe = Pipe()

        def get_pipe_transport(self, fd: int) -> Pipe:
            return self.pipe

    async def scenario() -> None:
        proto = _WorkerProtocol("t", collections.deque(), max_buffered=100)
        process = Process()
        proto.connection_made(process)  # type: ignore[arg-type]
        for _ in range(10):
            proto.pipe_data_received(1, b"x" * 10)  # 100 bytes: at the limit, not over it
        assert process.pipe.pauses == 0
        proto.pipe_data_received(1, b"x")
        assert process.pipe.pauses == 1
        proto.pipe_data_received(1, b"x" * 50)  # paused already: not paused again
        assert process.pipe.pauses == 1

    asyncio.run(scenario())


def test_a_stderr_line_longer_than_8_kib_is_cut_once_saying_how_much() -> None:
    """A worker writing 10,004 bytes to stderr before a newline: its first 8 KiB shown, the
    rest counted (kit/stderr.py), once; the next line on its own."""

    async def scenario() -> list[str]:
        proto = _WorkerProtocol("t", collections.deque(), max_buffered=100)
        proto.pipe_data_received(2, b"a" * 10_000)
        proto.pipe_data_received(2, b"next\nthen\n")
        return list(proto.tail)

    assert asyncio.run(scenario()) == ["a" * 8192 + " ... (1,812 more bytes of this line not shown)", "then"]


def test_a_workers_last_stderr_words_with_no_newline_are_shown_when_stderr_closes() -> None:
    """A worker that dies mid-line ("Segmentation fault" with no newline, a panic cut short):
    its last words reach the tail (and the failure report) when its stderr closes, and only
    stderr's closing does that."""

    async def scenario() -> list[str]:
        proto = _WorkerProtocol("t", collections.deque(), max_buffered=100)
        proto.pipe_data_received(2, b"first\nlast words")
        proto.pipe_connection_lost(1, None)  # its stdout closing first changes nothing here
        assert list(proto.tail) == ["first"]
        proto.pipe_connection_lost(2, None)
        return list(proto.tail)

    assert asyncio.run(scenario()) == ["first", "last words"]


# writes "a", waits for a line on stdin, writes "b" and "c" a moment apart, then waits
# "a" half a second after a first line (the reader is waiting for it then, even on a loaded
# machine: written at start-up, it could be there before the first read was asked for);
# "b" and "c" after a second line
TWO_BEATS = (
    "import sys, time\n"
    "out = sys.stdout.buffer\n"
    "sys.stdin.readline(); time.sleep(0.5)\n"
    "out.write(b'a'); out.flush()\n"
    "sys.stdin.readline()\n"
    "out.write(b'b'); out.flush(); time.sleep(0.05); out.write(b'c'); out.flush()\n"
    "sys.stdin.read()\n"
)


def test_a_chunk_is_timed_only_when_the_read_saw_it_arrive(tmp_path: Path) -> None:
    """The rules on confirmation measure the gap between a worker's EOPs: a chunk read
    while the reader waited arrived then; a chunk already queued when asked for may have
    arrived at any time since, and says so (None) rather than the time it was read."""

    async def scenario() -> tuple[float | None, float, float | None, float | None]:
        t = await ProcessTransport.spawn([sys.executable, "-c", TWO_BEATS], dict(os.environ), str(tmp_path), "beats")
        try:
            await t.write(b"start\n")
            assert await t.read() == b"a"  # waited for it
            first = t.last_arrival
            await t.write(b"go\n")
            await asyncio.sleep(0.5)  # busy elsewhere: "b" and "c" arrive unseen
            read_at = time.monotonic()
            assert await t.read() == b"b"
            queued = t.last_arrival
            assert await t.read() == b"c"
            return first, read_at, queued, t.last_arrival
        finally:
            t.kill()
            await t.stop(1, 1)

    first, read_at, queued, queued_too = asyncio.run(scenario())
    assert first is not None and first < read_at
    assert queued is None and queued_too is None


def test_abort_kills_the_worker_and_closes_its_pipes(tmp_path: Path) -> None:
    """What a run calls on a worker it gives up on: nothing of it is left open afterwards."""

    async def scenario() -> tuple[int | None, bool]:
        t = await ProcessTransport.spawn([sys.executable, "-c", BUSY], dict(os.environ), str(tmp_path), "busy")
        await t.abort()
        return t._transport.get_returncode(), t._transport.is_closing()

    returncode, closing = asyncio.run(scenario())
    assert returncode is not None and returncode < 0  # killed by a signal
    assert closing


def _program(folder: Path, name: str) -> Path:
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n")
    path.chmod(0o755)
    return path


def test_the_copy_beside_etlstage_is_used_only_for_a_bare_name_path_lacks(tmp_path: Path, monkeypatch) -> None:
    """A bare name PATH finds stays as written (PATH decides, as in a shell); a name with a
    ``/`` is the user's own path; only a bare name PATH lacks takes the copy beside etlstage."""
    from etlstage.kit.transport import resolve_program

    beside, on_path = tmp_path / "venv-bin", tmp_path / "on-path"
    monkeypatch.setattr(sys, "executable", str(beside / "python"))
    copy = _program(beside, "tool")
    _program(beside, "sub/tool")
    _program(on_path, "tool")

    assert resolve_program(["tool", "-x"], {"PATH": str(on_path)}) == ["tool", "-x"]
    assert resolve_program(["sub/tool"], {"PATH": str(on_path)}) == ["sub/tool"]
    assert resolve_program(["tool", "-x"], {"PATH": str(tmp_path / "empty")}) == [str(copy), "-x"]
    assert resolve_program([], {"PATH": str(on_path)}) == []


def test_a_program_beside_the_etlstage_script_is_found_when_the_interpreter_is_elsewhere(
    tmp_path: Path, monkeypatch
) -> None:
    """``/opt/tool/bin/etlstage`` run by a Python in another folder (pipx, a symlinked
    interpreter): its sibling console scripts are found beside the script itself; a script
    of another name is no such folder."""
    from etlstage.kit.transport import resolve_program

    scripts, interpreter = tmp_path / "tool-bin", tmp_path / "python-bin"
    monkeypatch.setattr(sys, "executable", str(interpreter / "python3"))
    copy = _program(scripts, "etlstage-rdss")
    empty = {"PATH": str(tmp_path / "empty")}
    monkeypatch.setattr(sys, "argv", [str(scripts / "etlstage"), "run"])
    assert resolve_program(["etlstage-rdss", "run"], empty) == [str(copy), "run"]
    monkeypatch.setattr(sys, "argv", [str(scripts / "pytest")])
    assert resolve_program(["etlstage-rdss", "run"], empty) == ["etlstage-rdss", "run"]


def test_a_write_blocked_on_a_worker_that_exits_without_reading_fails_at_once(tmp_path: Path) -> None:
    """A writer waiting for room in a worker's stdin must wake and fail when the worker
    exits, not wait for room that never comes."""

    async def scenario() -> None:
        deaf = "import time; time.sleep(0.5)"  # never reads its stdin
        t = await ProcessTransport.spawn([sys.executable, "-c", deaf], dict(os.environ), str(tmp_path), "deaf")
        try:
            with pytest.raises(BrokenPipeError):
                await asyncio.wait_for(t.write(b"x" * (16 << 20)), 20)  # far more than the pipe holds
        finally:
            t.kill()
            await t.stop(1, 1)

    asyncio.run(scenario())


# ignores the end of its stdin; leaves with status 42 on SIGTERM
TERM_ONLY = (
    "import signal, sys, time\n"
    "signal.signal(signal.SIGTERM, lambda *_: sys.exit(42))\n"
    "sys.stdout.write('up'); sys.stdout.flush()\n"
    "while True: time.sleep(0.05)\n"
)


def test_a_worker_that_ignores_its_closed_stdin_gets_sigterm_before_a_kill(tmp_path: Path) -> None:
    """The stop sequence: stdin closed, then SIGTERM after ``grace`` (the worker's own
    handler runs: a graceful exit), SIGKILL only if that is ignored too."""

    async def scenario() -> int | None:
        t = await ProcessTransport.spawn([sys.executable, "-c", TERM_ONLY], dict(os.environ), str(tmp_path), "term")
        assert await t.read() == b"up"  # its handler is installed
        return await t.stop(grace=0.2, term_grace=5)

    assert asyncio.run(scenario()) == 42  # not -9: it was asked, not killed


# writes 64 MiB to stdout as fast as it can, then says so on stderr
FLOOD = (
    "import sys\n"
    "block = b'x' * (1 << 20)\n"
    "for _ in range(64): sys.stdout.buffer.write(block); sys.stdout.buffer.flush()\n"
    "sys.stderr.write('all written\\n')\n"
)


def test_output_nobody_reads_stops_the_worker_at_4_mib_held(tmp_path: Path) -> None:
    """Memory stays flat behind a slow reader: the supervisor holds at most 4 MiB of a
    worker's unread output (plus the read that crossed the line), then stops reading and the
    worker blocks on its full pipe, far short of its 64 MiB."""

    async def scenario() -> tuple[int, int | None]:
        t = await ProcessTransport.spawn([sys.executable, "-c", FLOOD], dict(os.environ), str(tmp_path), "flood")
        try:
            deadline = time.monotonic() + 60
            while not t._protocol._paused:  # a slow machine's pause in the flood is not the stop
                assert time.monotonic() < deadline, f"never paused; {t._protocol.buffered} bytes held"
                await asyncio.sleep(0.02)
            await asyncio.sleep(0.3)  # nothing more is read once paused
            return t._protocol.buffered, t.returncode()
        finally:
            await t.abort()  # killed, its pipes closed

    held, code = asyncio.run(scenario())
    assert code is None  # blocked, not done
    assert 4 << 20 < held <= 5 << 20, held


def test_reading_paused_at_the_limit_resumes_only_once_half_of_it_is_taken() -> None:
    """Backpressure with room to spare: over ``max_buffered`` the worker's stdout is no
    longer read; it is read again when what is held falls to half the limit, not at the
    first chunk taken (which would pause and resume at every chunk near the limit)."""
    from etlstage.kit.transport import _WorkerProtocol

    class Pipe(asyncio.ReadTransport):
        def __init__(self) -> None:
            super().__init__()
            self.calls: list[str] = []

        def pause_reading(self) -> None:
            self.calls.append("pause")

        def resume_reading(self) -> None:
            self.calls.append("resume")

    class Process:
        def __init__(self, pipe: Pipe) -> None:
            self.pipe = pipe

        def get_pipe_transport(self, fd: int) -> Pipe:
            return self.pipe

    async def scenario() -> None:
        pipe = Pipe()
        protocol = _WorkerProtocol("w", collections.deque(), max_buffered=100)
        protocol.connection_made(Process(pipe))  # type: ignore[arg-type]
        for _ in range(4):
            protocol.pipe_data_received(1, b"x" * 30)
        assert pipe.calls == ["pause"] and protocol.buffered == 120
        protocol.pipe_data_received(1, b"x" * 30)  # what was already on its way: held, no second pause
        assert pipe.calls == ["pause"]
        held = []
        for left in (120, 90, 60):  # still above half the limit: not read
            held.append(protocol.take())
            assert protocol.buffered == left and pipe.calls == ["pause"], (left, pipe.calls)
        held.append(protocol.take())
        assert protocol.buffered == 30 and pipe.calls == ["pause", "resume"]
        assert b"".join(held) == b"x" * 120

    asyncio.run(scenario())


# writes the sizes of its stdin and stdout pipes (F_GETPIPE_SZ) to the file named, then waits
PIPE_SIZES = (
    "import fcntl, sys\n"
    "open(sys.argv[1], 'w').write(' '.join(str(fcntl.fcntl(fd, 1032)) for fd in (0, 1)))\n"
    "sys.stdin.read()"
)


def test_a_workers_stdin_and_stdout_pipes_are_grown_to_a_mebibyte(tmp_path: Path) -> None:
    """Bigger pipes, fewer wake-ups per MB moved: both pipes are set to 1 MiB where the
    system allows it (``/proc/sys/fs/pipe-max-size``), and stay at the kernel's 64 KiB where not."""
    mebibyte = 1 << 20  # written out: the module's constant changed would change the test too

    report = tmp_path / "sizes"

    async def scenario() -> None:
        argv = [sys.executable, "-c", PIPE_SIZES, str(report)]
        t = await ProcessTransport.spawn(argv, dict(os.environ), str(tmp_path), "sizes")
        try:
            deadline = time.monotonic() + 20
            while not report.exists() or not report.read_text():
                assert time.monotonic() < deadline, "the worker never wrote its pipe sizes"
                await asyncio.sleep(0.02)
        finally:
            await t.stop(5, 5)

    asyncio.run(scenario())
    allowed = os.geteuid() == 0 or int(Path("/proc/sys/fs/pipe-max-size").read_text()) >= mebibyte
    expected = mebibyte if allowed else 64 << 10
    assert report.read_text().split() == [str(expected), str(expected)]


def _gone(pid: int) -> bool:
    import psutil

    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_an_exit_ends_the_output_a_child_holds_open_after_what_was_written_is_read(tmp_path: Path) -> None:
    """The worker writes 5 MB (more than is read ahead: reading pauses), starts a child on
    its stdout and exits.  A reader that comes back late still gets every byte, then the
    end of the output (kit.exits), and the child is gone."""
    from etlstage.kit.exits import EXIT_DRAIN
    from tests.support.waiting import wait_for

    pid_file = tmp_path / "child.pid"
    script = f"head -c 5000000 /dev/zero; sleep 300 & echo $! > {pid_file}; exit 3"

    async def scenario() -> int:
        t = await ProcessTransport.spawn(["sh", "-c", script], dict(os.environ), str(tmp_path), "w")
        try:
            async with asyncio.timeout(20):
                await t.wait()
            await asyncio.sleep(2 * EXIT_DRAIN)  # a slow reader: the drain's time passes with bytes unread
            got = 0
            async with asyncio.timeout(20):  # the request time limit (600 s) would be the bound without the rule
                while chunk := await t.read():
                    got += len(chunk)
            return got
        finally:
            await t.abort()

    assert asyncio.run(scenario()) == 5_000_000
    child = int(pid_file.read_text())
    wait_for(lambda: _gone(child), 10, f"the worker's child {child} to be gone")


def test_killing_the_group_of_no_worker_signals_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    """``kill_group`` with no group (None), 0 or 1 signals nothing: ``killpg(0)`` would kill
    the caller's own group (the supervisor), ``killpg(1)`` as root init's. ``os.killpg`` is
    replaced by a recorder, so a mistake here (or a mutant) signals no real process."""
    from etlstage.kit import exits

    sent: list[tuple[int, int]] = []
    monkeypatch.setattr(exits.os, "killpg", lambda pgid, sig: sent.append((pgid, sig)))
    for pgid in (None, 0, 1):
        exits.kill_group(pgid)
    assert sent == []
    exits.kill_group(4242)  # a worker's group: signalled
    assert sent == [(4242, exits.signal.SIGKILL)]


def test_a_worker_blocked_on_its_empty_stdin_is_seen_waiting_for_input(tmp_path: Path) -> None:
    """What ends the start-up quiet early on both engines: a worker blocked reading its
    stdin, with nothing written, is seen waiting (its tree's threads, an empty pipe)."""

    async def scenario() -> tuple[bool, bool]:
        cat = [sys.executable, "-c", "import sys; sys.stdin.buffer.read()"]
        t = await ProcessTransport.spawn(cat, dict(os.environ), str(tmp_path), "cat")
        try:
            deadline = time.monotonic() + 10
            while not t.waiting_for_input() and time.monotonic() < deadline:
                await asyncio.sleep(0.01)
            seen = t.waiting_for_input()
        finally:
            await t.abort()
        return seen, t.waiting_for_input()

    waiting, after_abort = asyncio.run(scenario())
    assert waiting is True
    assert after_abort is False  # gone: waiting for nothing


def test_pipe_pending_counts_the_bytes_waiting_unread(tmp_path: Path) -> None:
    from etlstage.kit.exits import pipe_pending

    r, w = os.pipe()
    try:
        assert pipe_pending(r) == 0
        os.write(w, b"12345")
        assert pipe_pending(r) == 5
        os.read(r, 2)
        assert pipe_pending(r) == 3
    finally:
        os.close(r)
        os.close(w)


def test_blocks_written_together_arrive_whole_and_in_order_through_a_full_pipe(tmp_path: Path) -> None:
    """A job's blocks and its EOB go in one ``writev`` when nothing waits to be written;
    what a full pipe does not take goes on through the event loop's transport. Blocks
    larger than the pipe, several jobs in a row, one block alone: every byte, in order."""
    rnd = __import__("random").Random(5)
    jobs = [
        [os.urandom(rnd.choice([1, 100, 70_000, 1_500_000])) for _ in range(rnd.randrange(1, 5))] for _ in range(12)
    ]

    async def scenario() -> bytes:
        t = await ProcessTransport.spawn(["cat"], dict(os.environ), str(tmp_path), "cat")
        got = bytearray()

        async def drain() -> None:
            while chunk := await t.read():
                got.extend(chunk)

        reader = asyncio.ensure_future(drain())
        try:
            for blocks in jobs:
                await t.write_all(blocks)
            t.close_input()
            await asyncio.wait_for(reader, 60)
            return bytes(got)
        finally:
            t.kill()
            await t.stop(1, 1)

    assert asyncio.run(scenario()) == b"".join(b for blocks in jobs for b in blocks)
