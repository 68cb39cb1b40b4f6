"""The supervisor's side of the wire, for tests of workers run as real subprocesses.

A conversation is a plain table of ``(send, expect)`` steps written with symbolic
markers, so one table serves every marker set::

    ("a{M}b{M}c{M}{B}", "A{M}B{M}C{M}{P}")   # a supervisor-driven batch of 3

``{M}`` EOM, ``{P}`` EOP, ``{B}`` EOB, ``{N}`` BNC; other text is latin-1, so
``"caf\\xc3\\xa9"`` is the UTF-8 bytes of "café".  :func:`render` turns a step into bytes.
:class:`WireWorker` spawns the worker with the ``ETLSTAGE_*`` environment, writes each
``send`` and reads exactly ``len(expect)`` bytes back (an extra or missing byte shows up
as a mismatch or a timeout), then closes stdin and collects what is left and the exit
status.  (To be re-pointed at ``etlstage.testing`` once the harness lands.)
"""

from __future__ import annotations

import os
import re
import selectors
import subprocess
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from etlstage.protocol import Markers, Scenario
from tests.support.worker_env import without_supervisor_vars

Step = tuple[str, str]

DEFAULT = Markers()
PRINTABLE = Markers(eom=ord("|"), eop=ord("#"), eob=ord("~"), bnc=ord("^"))
PRINTABLE_NL = Markers(eom=0x0A, eop=ord("#"), eob=ord("~"), bnc=ord("^"))  # awk under mawk: EOM is newline


def render(text: str, markers: Markers) -> bytes:
    raw = text.encode("latin-1")
    for token, byte in ((b"{M}", markers.EOM), (b"{P}", markers.EOP), (b"{B}", markers.EOB), (b"{N}", markers.BNC)):
        raw = raw.replace(token, byte)
    return raw


def loader_expectation(expect: str) -> str:
    """What an L-worker answers where a T-worker answers ``expect``: the signals only."""
    return "".join(re.findall(r"\{[PN]\}", expect))


@dataclass
class Finished:
    rest: bytes  # stdout after the last expected reply (must be empty)
    code: int | None
    stderr: bytes


@dataclass
class WireWorker:
    argv: Sequence[str]
    scenario: Scenario
    extra_env: dict[str, str] = field(default_factory=dict)
    cwd: str | None = None

    def __post_init__(self) -> None:
        env = without_supervisor_vars()
        env.update(self.scenario.to_env())
        env.update(self.extra_env)
        self.proc = subprocess.Popen(
            list(self.argv),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            cwd=self.cwd,
        )
        self._stderr: list[bytes] = []
        self._pump = threading.Thread(target=self._drain_stderr, daemon=True)
        self._pump.start()
        self._writer: threading.Thread | None = None
        os.set_blocking(self.proc.stdout.fileno(), False)  # type: ignore[union-attr]

    def _drain_stderr(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self._stderr.append(line)

    @property
    def stderr(self) -> bytes:
        return b"".join(self._stderr)

    def send(self, data: bytes) -> None:
        """Write in the background, so a worker answering while we write cannot deadlock us."""
        self._join_writer()
        stdin = self.proc.stdin
        assert stdin is not None

        def write() -> None:
            try:
                stdin.write(data)
                stdin.flush()
            except BrokenPipeError:
                pass  # the worker died; the read that follows reports it

        self._writer = threading.Thread(target=write, daemon=True)
        self._writer.start()

    def _join_writer(self) -> None:
        if self._writer is not None:
            self._writer.join(10)
            self._writer = None

    def read(self, n: int, timeout: float = 10.0) -> bytes:
        """Up to ``n`` bytes: returns early only on EOF or timeout."""
        fd = self.proc.stdout.fileno()  # type: ignore[union-attr]
        got = bytearray()
        deadline = time.monotonic() + timeout
        with selectors.DefaultSelector() as sel:
            sel.register(fd, selectors.EVENT_READ)
            while len(got) < n:
                left = deadline - time.monotonic()
                if left <= 0 or not sel.select(left):
                    break
                chunk = os.read(fd, n - len(got))
                if not chunk:
                    break
                got += chunk
        return bytes(got)

    def step(self, send: bytes, expect: bytes) -> bytes:
        if send:
            self.send(send)
        reply = self.read(len(expect)) if expect else b""
        return reply

    def finish(self, timeout: float = 10.0) -> Finished:
        """Close stdin ("no more work"), read the rest of stdout, wait for the exit."""
        self._join_writer()
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.close()
        except BrokenPipeError:
            pass
        rest = bytearray()
        deadline = time.monotonic() + timeout
        while True:
            chunk = self.read(1 << 16, max(0.0, deadline - time.monotonic()))
            rest += chunk
            if not chunk:
                break
        try:
            code = self.proc.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = None
        self._pump.join(5)
        return Finished(bytes(rest), code, self.stderr)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def converse(worker: WireWorker, steps: Sequence[Step], markers: Markers) -> Finished:
    """Play ``steps``, asserting each reply byte for byte; then finish."""
    try:
        for i, (send, expect) in enumerate(steps):
            want = render(expect, markers)
            got = worker.step(render(send, markers), want)
            assert got == want, f"step {i} {send!r}: expected {want!r}, got {got!r}; stderr: {worker.stderr[-500:]!r}"
        return worker.finish()
    finally:
        worker.kill()
