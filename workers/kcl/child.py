"""The MLD child process: spawned from an argv list (never a shell), JSON lines over its
stdin/stdout with time limits, stderr inherited (it reaches the supervisor's log as the
adapter's own).

Reads and writes are non-blocking and interleaved, so a child that prints while the
adapter is still writing a long ``processRecords`` line cannot deadlock the pair.
"""

from __future__ import annotations

import logging
import os
import selectors
import signal
import subprocess
import time

from etlstage_workers.kcl.errors import ChildExited, ChildTimeout

log = logging.getLogger("etlstage.kcl.child")
READ_CHUNK = 1 << 16
PIPE_SIZE = 1 << 20


def _grow_pipe(fd: int) -> None:
    """Ask Linux for a 1 MiB pipe: fewer write/wake-up rounds per processRecords line."""
    try:
        import fcntl

        fcntl.fcntl(fd, getattr(fcntl, "F_SETPIPE_SZ", 1031), PIPE_SIZE)
    except (OSError, ImportError):
        pass  # not Linux, or over /proc/sys/fs/pipe-max-size: the default size works too


class MldChild:
    def __init__(self, argv: list[str], shard_id: str) -> None:
        self.argv = argv
        self.shard_id = shard_id
        try:
            self.proc = subprocess.Popen(
                argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0, start_new_session=True
            )
        except OSError as exc:
            raise ChildExited(f"cannot start the MLD child {argv!r}: {exc}") from None
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self._in = self.proc.stdin.fileno()
        self._out = self.proc.stdout.fileno()
        _grow_pipe(self._in)
        os.set_blocking(self._in, False)
        os.set_blocking(self._out, False)
        self._buf = b""
        self._eof = False
        self._sel = selectors.DefaultSelector()
        log.info("started MLD child pid %d for %s: %s", self.proc.pid, shard_id, " ".join(argv))

    @property
    def pid(self) -> int:
        return self.proc.pid

    def describe(self) -> str:
        return f"MLD child pid {self.proc.pid} ({' '.join(self.argv)[:120]}) for {self.shard_id}"

    # --- I/O ------------------------------------------------------------------------------

    def send(self, data: bytes, deadline: float, waiting_for: str) -> None:
        """Write ``data`` completely, reading whatever the child prints meanwhile."""
        view = memoryview(data)
        while view:
            try:
                n = os.write(self._in, view)
                view = view[n:]
                continue
            except BlockingIOError:
                pass
            except BrokenPipeError:
                raise self._exited(waiting_for) from None
            self._wait(deadline, waiting_for, want_write=True)

    def read_line(self, deadline: float, waiting_for: str) -> bytes:
        """The next line from the child's stdout, without its newline."""
        while True:
            nl = self._buf.find(b"\n")
            if nl >= 0:
                line, self._buf = self._buf[:nl], self._buf[nl + 1 :]
                return line
            if self._eof:
                if self._buf:  # a last line without newline, then EOF
                    line, self._buf = self._buf, b""
                    return line
                raise self._exited(waiting_for)
            self._wait(deadline, waiting_for, want_write=False)

    def _wait(self, deadline: float, waiting_for: str, want_write: bool) -> None:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise ChildTimeout(f"{self.describe()} did not answer {waiting_for} in time (it is still running)")
        sel = self._sel
        if not self._eof:
            sel.register(self._out, selectors.EVENT_READ)
        if want_write:
            sel.register(self._in, selectors.EVENT_WRITE)
        try:
            events = sel.select(min(remaining, 1.0))
        finally:
            for fd in (self._out, self._in):
                try:
                    sel.unregister(fd)
                except KeyError:
                    pass
        for key, _ in events:
            if key.fd == self._out:
                self._fill()
        if not events and self.proc.poll() is not None and not want_write:
            self._fill()

    def _fill(self) -> None:
        try:
            chunk = os.read(self._out, READ_CHUNK)
        except BlockingIOError:
            return
        if chunk:
            self._buf += chunk
        else:
            self._eof = True

    def _exited(self, waiting_for: str) -> ChildExited:
        try:
            code = self.proc.wait(timeout=2)
        except subprocess.TimeoutExpired:
            return ChildExited(f"{self.describe()} closed its stdout while the adapter waited for {waiting_for}")
        how = f"was killed by signal {-code}" if code < 0 else f"exited with status {code}"
        return ChildExited(f"{self.describe()} {how} while the adapter waited for {waiting_for}")

    # --- ending -----------------------------------------------------------------------------

    def close_and_wait(self, timeout: float) -> int | None:
        """Close its stdin (end of work), drain stdout, wait; kill it if it lingers."""
        try:
            self.proc.stdin.close()  # type: ignore[union-attr]
        except OSError:
            pass
        deadline = time.monotonic() + timeout
        while not self._eof and time.monotonic() < deadline:
            try:
                line = self.read_line(deadline, "its exit")
            except (ChildExited, ChildTimeout):
                break
            if line.strip():
                log.info("%s after its last status: %s", self.shard_id, line[:500].decode("utf-8", "replace"))
        try:
            return self.proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            log.error("%s did not exit within %.0f s after its stdin closed; killing it", self.describe(), timeout)
            self.kill()
            return None

    def kill(self) -> None:
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                self.proc.kill()
        for stream in (self.proc.stdin, self.proc.stdout):
            try:
                stream.close()  # type: ignore[union-attr]
            except OSError:
                pass
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            log.error("%s survived SIGKILL for 5 s", self.describe())
        self._sel.close()
