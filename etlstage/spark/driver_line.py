"""The driver line: how Spark tasks reach the driver's files without sharing a mount.

Tasks run on executors that need not see any path of the driver's.  What they used to
write or read under the driver's ``state_dir`` and the checkpoint goes through this
small authenticated TCP service in the driver's process instead:

- dead letters and refused messages, written to the pipeline's state (SQLite) before the
  call returns, so before the task returns and before its batch can commit;
- each worker slot's tally (starts, restarts, failures), for the progress and summary;
- a supervisor-offsets extractor's message count per window, for the source's planner;
- the spooled windows of driver-side extractors, read by the tasks in pieces;
- a native stage's write-once files in its folder (``ctx.keep``: a Kinesis task's reached
  positions), returned as they are kept.

The driver keeps these files where it always did (its ``state_dir``, and the engine's
folder: :func:`etlstage.spark.checkpoint.engine_dir`); executors need only reach the
driver's host, as Spark's own RPC already does.  Each run has its own secret token; a
request without it is refused, and spool reads are confined to the spool's file names.

A request is the run's token (:data:`TOKEN_BYTES` bytes), then a frame: a 4-byte header
length, a JSON header, an 8-byte payload length, a payload; an answer is a frame.  The
driver reads the token first, within :data:`AUTH_DEADLINE` seconds, and compares it in
constant time before it reads anything else; the sizes a frame announces are checked
before it is read (:data:`MAX_HEADER`; a payload at most the largest batch a stage can
set aside); at most :data:`MAX_CONNECTIONS` requests are served at once (a request
beyond is answered "busy" unread, and the task tries again).
"""

from __future__ import annotations

import contextlib
import hmac
import json
import logging
import os
import re
import secrets
import socket
import socketserver
import struct
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from etlstage.errors import PipelineError

log = logging.getLogger("etlstage.spark")

SPOOL_FILE = re.compile(r"^(ahead/)?\d+-\d+\.bin$")
TIMEOUT = 120.0  # seconds a call may take (a dead letter waits for SQLite's lock)
PIECE = 8 << 20  # a spooled window is read in pieces of about this size
TOKEN_BYTES = 32  # secrets.token_hex(16)
AUTH_DEADLINE = 5.0  # seconds a connection has to send the token
IDLE = 30.0  # seconds an authenticated request may go silent while it is read
MAX_HEADER = 1 << 20  # a request's JSON header (a dead letter's error text is cut to fit)
MAX_CONNECTIONS = 64  # requests served at once; one thread each
BUSY = "busy"

Handler = Callable[[dict[str, Any], bytes], tuple[dict[str, Any], bytes]]


class _Dropped(Exception):
    """The driver line accepted the connection and closed it without an answer (busy: unread)."""


class Refused(Exception):
    """A request the driver line does not read on: the reason goes back to the caller."""


def _send(sock: socket.socket, header: dict[str, Any], payload: bytes = b"") -> None:
    head = json.dumps(header).encode()
    sock.sendall(struct.pack(">I", len(head)) + head + struct.pack(">Q", len(payload)))
    if payload:
        sock.sendall(payload)


def _exactly(sock: socket.socket, n: int, deadline: float | None = None) -> bytes:
    """``n`` bytes; by ``deadline`` (monotonic) in all, when given (TimeoutError after)."""
    chunks, got = [], 0
    while got < n:
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("too slow")
            sock.settimeout(left)
        chunk = sock.recv(min(n - got, 1 << 20))
        if not chunk:
            raise ConnectionError("the other side closed the connection")
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def _receive(
    sock: socket.socket, max_header: int = 1 << 32, max_payload: int = 1 << 64
) -> tuple[dict[str, Any], bytes]:
    """A frame; :class:`Refused` when a size it announces is over its bound (unread)."""
    (n,) = struct.unpack(">I", _exactly(sock, 4))
    if n > max_header:
        raise Refused(f"a request header of {n} bytes (at most {max_header})")
    header = json.loads(_exactly(sock, n))
    if not isinstance(header, dict):
        raise Refused("a request header that is not a JSON object")
    (size,) = struct.unpack(">Q", _exactly(sock, 8))
    if size > max_payload:
        raise Refused(f"a request payload of {size} bytes (at most {max_payload})")
    return header, _exactly(sock, size) if size else b""


@dataclass(frozen=True)
class LineAddress:
    """Where tasks reach the driver line (travels with the plan to every task)."""

    host: str
    port: int
    token: str

    def __repr__(self) -> str:  # the token stays out of logs and error messages
        return f"LineAddress({self.host}:{self.port})"

    def call(self, op: str, header: dict[str, Any], payload: bytes = b"") -> tuple[dict[str, Any], bytes]:
        """One request; its answer, or :class:`PipelineError` naming what failed."""
        give_up, pause = time.monotonic() + TIMEOUT, 0.01
        while True:
            try:
                answer, data = self._once(op, header, payload)
            except _Dropped as exc:  # accepted, then dropped unanswered: "busy" cut short
                answer, data = {"error": BUSY, "dropped": str(exc.__cause__)}, b""
            except (OSError, ValueError, struct.error, Refused) as exc:
                raise self._unreachable(op, exc) from None
            if answer.get("error") != BUSY:
                break
            if time.monotonic() >= give_up:
                raise self._unreachable(op, answer.get("dropped") or "its threads stayed busy") from None
            time.sleep(pause)  # every thread of the driver line was serving: the request was not read
            pause = min(pause * 2, 1.0)
        if "error" in answer:
            raise PipelineError(str(answer["error"]))
        return answer, data

    def _once(self, op: str, header: dict[str, Any], payload: bytes) -> tuple[dict[str, Any], bytes]:
        with socket.create_connection((self.host, self.port), timeout=TIMEOUT) as sock:
            try:
                sock.sendall(self.token.encode())
                _send(sock, {**header, "op": op}, payload)
            except (BrokenPipeError, ConnectionResetError) as exc:
                try:  # a busy line answers unread and closes: its answer may be there all the same
                    return _receive(sock)
                except (OSError, ValueError, struct.error):
                    raise _Dropped() from exc
            try:
                return _receive(sock)
            except (ConnectionResetError, ConnectionAbortedError) as exc:
                raise _Dropped() from exc
            except ConnectionError as exc:  # closed before any answer (not a refused connection)
                if isinstance(exc, ConnectionRefusedError):
                    raise
                raise _Dropped() from exc

    def _unreachable(self, op: str, why: object) -> PipelineError:
        return PipelineError(
            f"the task cannot reach the driver line at {self.host}:{self.port} ({op}): {why}; "
            "executors must reach the driver's host (as for Spark's own driver port)"
        )

    def read(self, stage: str, name: str, piece: int = PIECE) -> Iterator[bytes]:
        """A spooled window file of ``stage``, in pieces."""
        offset = 0
        while True:
            answer, data = self.call("spool", {"stage": stage, "name": name, "offset": offset, "size": piece})
            if data:
                yield data
                offset += len(data)
            if answer.get("eof") or not data:
                return


class DriverLine:
    """The server side, in the driver's process, for the ``with`` block: ``handlers`` by op.

    ``bind``: the local address to listen on (an address no interface has: every one,
    with a warning); ``max_payload``: the largest payload a request may carry."""

    def __init__(
        self,
        handlers: dict[str, Handler],
        bind: str = "127.0.0.1",
        advertise: str = "127.0.0.1",
        *,
        max_payload: int = 256 << 20,
        max_connections: int = MAX_CONNECTIONS,
    ) -> None:
        self.handlers = handlers
        self.token = secrets.token_hex(TOKEN_BYTES // 2)
        self.max_payload = max_payload
        self.active = 0  # requests being served now
        line = self
        lock = threading.Lock()

        class Serve(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                line._serve(self.request)

        class Server(socketserver.ThreadingTCPServer):
            daemon_threads = True
            allow_reuse_address = True
            request_queue_size = max_connections

            def process_request(self, request: Any, client_address: Any) -> None:
                with lock:
                    full = line.active >= max_connections
                    if not full:
                        line.active += 1
                if full:  # answered without a thread and unread; the caller tries again
                    with contextlib.suppress(OSError):
                        request.setblocking(False)
                        _send(request, {"error": BUSY})
                    self.shutdown_request(request)
                    return
                super().process_request(request, client_address)

            def process_request_thread(self, request: Any, client_address: Any) -> None:
                try:
                    super().process_request_thread(request, client_address)
                finally:
                    with lock:
                        line.active -= 1

        try:
            self._server = Server((bind, 0), Serve)
        except OSError as exc:  # the driver's host name names no local interface (a NAT, a service)
            log.warning("the driver line cannot listen on %s (%s): listening on every interface", bind, exc)
            self._server = Server(("0.0.0.0", 0), Serve)
        self.address = LineAddress(advertise, self._server.server_address[1], self.token)
        self._thread = threading.Thread(target=self._server.serve_forever, name="etlstage line", daemon=True)

    def _serve(self, sock: socket.socket) -> None:
        with contextlib.suppress(OSError, ValueError, struct.error):
            # The token first, in a short time, before any length it could announce is read.
            token = _exactly(sock, TOKEN_BYTES, time.monotonic() + AUTH_DEADLINE)
            if not hmac.compare_digest(token, self.token.encode()):
                log.warning("the driver line refused a request without this run's token")
                _send(sock, {"error": "refused: not this run's token"})
                return
            sock.settimeout(IDLE)
            try:
                header, payload = _receive(sock, MAX_HEADER, self.max_payload)
            except Refused as exc:
                log.warning("the driver line refused %s", exc)
                _send(sock, {"error": f"the driver line refused {exc}"})
                return
            sock.settimeout(TIMEOUT)
            handler = self.handlers.get(str(header.get("op")))
            if handler is None:
                _send(sock, {"error": f"the driver line has no operation {header.get('op')!r}"})
                return
            try:
                answer, data = handler(header, payload)
            except Exception as exc:  # the task fails with it; the driver goes on
                log.debug("line %s failed: %s", header.get("op"), exc)
                _send(sock, {"error": str(exc)})
                return
            _send(sock, answer, data)

    def __enter__(self) -> DriverLine:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()


def read_piece(folder: Path, header: dict[str, Any]) -> tuple[dict[str, Any], bytes]:
    """A piece of a spool file under ``folder``; only spool file names, never another path."""
    name = str(header["name"])
    if not SPOOL_FILE.match(name):
        raise PipelineError(f"not a spooled window's name: {name!r}")
    path = folder / name
    try:
        with open(path, "rb") as f:
            f.seek(int(header["offset"]))
            data = f.read(int(header["size"]))
    except FileNotFoundError:
        raise PipelineError(
            f"spooled window {path} is missing on the driver: the engine's folder must not be cleaned "
            "while the query runs"
        ) from None
    return {"eof": len(data) < int(header["size"])}, data


COUNT_NAME = re.compile(r"^[\w.#@+=-]+$")


def relative(name: str) -> Path:
    """``name`` as a path inside a folder: plain segments only (no ``..``, no absolute path)."""
    parts = name.split("/")
    if not all(COUNT_NAME.match(p) and not p.startswith(".") for p in parts):
        raise PipelineError(f"not a file name inside the stage's folder: {name!r}")
    return Path(*parts)


def keep_once(path: Path, data: bytes) -> bytes:
    """``data`` written durably at ``path`` unless a file is there already; what the file holds."""
    from etlstage.spark.checkpoint import private_folder
    from etlstage.state.durable import fsync_path

    private_folder(path.parent)
    tmp = path.with_name(f".{path.name}.{threading.get_ident()}.tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    try:
        os.link(tmp, path)  # atomic, and never over what another attempt wrote first
    except FileExistsError:
        pass
    finally:
        tmp.unlink(missing_ok=True)
    fsync_path(path.parent, directory=True)
    return path.read_bytes()


@dataclass(frozen=True)
class KeepOnce:
    """A native stage's write-once files in its folder on the driver, from any task:
    ``keep(name, data)`` returns what the file holds (``data``, or an earlier attempt's);
    ``keep(name, None)`` only reads it (None: no such file)."""

    driver_line: LineAddress
    stage: str

    def __call__(self, name: str, data: bytes | None) -> bytes | None:
        header = {"stage": self.stage, "name": name, "peek": data is None}
        answer, held = self.driver_line.call("once", header, data or b"")
        return held if answer.get("found") else None

    def to_option(self) -> str:
        """As a data source option (JSON), for a native source whose options are strings."""
        i = self.driver_line
        return json.dumps({"host": i.host, "port": i.port, "token": i.token, "stage": self.stage})

    @classmethod
    def from_option(cls, text: str) -> KeepOnce | None:
        if not text:
            return None
        doc = json.loads(text)
        return cls(LineAddress(str(doc["host"]), int(doc["port"]), str(doc["token"])), str(doc["stage"]))


__all__ = ["DriverLine", "Handler", "KeepOnce", "LineAddress", "keep_once", "read_piece", "relative"]
