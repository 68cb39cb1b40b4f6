"""The driver's inbox: how Spark tasks reach the driver's files without sharing a mount.

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

A frame is a 4-byte header length, a JSON header, an 8-byte payload length, a payload.
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
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from etlstage.errors import PipelineError

if TYPE_CHECKING:
    from etlstage.config.model import StageConfig
    from etlstage.spark.plan import Plan

log = logging.getLogger("etlstage.spark")

SPOOL_FILE = re.compile(r"^(ahead/)?\d+-\d+\.bin$")
TIMEOUT = 120.0  # seconds a call may take (a dead letter waits for SQLite's lock)
PIECE = 8 << 20  # a spooled window is read in pieces of about this size

Handler = Callable[[dict[str, Any], bytes], tuple[dict[str, Any], bytes]]


def _send(sock: socket.socket, header: dict[str, Any], payload: bytes = b"") -> None:
    head = json.dumps(header).encode()
    sock.sendall(struct.pack(">I", len(head)) + head + struct.pack(">Q", len(payload)))
    if payload:
        sock.sendall(payload)


def _exactly(sock: socket.socket, n: int) -> bytes:
    chunks, got = [], 0
    while got < n:
        chunk = sock.recv(min(n - got, 1 << 20))
        if not chunk:
            raise ConnectionError("the other side closed the connection")
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def _receive(sock: socket.socket) -> tuple[dict[str, Any], bytes]:
    (n,) = struct.unpack(">I", _exactly(sock, 4))
    header = json.loads(_exactly(sock, n))
    (size,) = struct.unpack(">Q", _exactly(sock, 8))
    return header, _exactly(sock, size) if size else b""


@dataclass(frozen=True)
class InboxAddress:
    """Where tasks reach the driver's inbox (travels with the plan to every task)."""

    host: str
    port: int
    token: str

    def __repr__(self) -> str:  # the token stays out of logs and error messages
        return f"InboxAddress({self.host}:{self.port})"

    def call(self, op: str, header: dict[str, Any], payload: bytes = b"") -> tuple[dict[str, Any], bytes]:
        """One request; its answer, or :class:`PipelineError` naming what failed."""
        try:
            with socket.create_connection((self.host, self.port), timeout=TIMEOUT) as sock:
                _send(sock, {**header, "op": op, "token": self.token}, payload)
                answer, data = _receive(sock)
        except (OSError, ValueError, struct.error) as exc:
            raise PipelineError(
                f"the task cannot reach the driver's inbox at {self.host}:{self.port} ({op}): {exc}; "
                "executors must reach the driver's host (as for Spark's own driver port)"
            ) from None
        if "error" in answer:
            raise PipelineError(str(answer["error"]))
        return answer, data

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


class Inbox:
    """The server side, in the driver's process, for the ``with`` block: ``handlers`` by op."""

    def __init__(self, handlers: dict[str, Handler], bind: str = "127.0.0.1", advertise: str = "127.0.0.1") -> None:
        self.handlers = handlers
        self.token = secrets.token_hex(16)
        inbox = self

        class Serve(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                inbox._serve(self.request)

        class Server(socketserver.ThreadingTCPServer):
            daemon_threads = True
            allow_reuse_address = True

        self._server = Server((bind, 0), Serve)
        self.address = InboxAddress(advertise, self._server.server_address[1], self.token)
        self._thread = threading.Thread(target=self._server.serve_forever, name="etlstage inbox", daemon=True)

    def _serve(self, sock: socket.socket) -> None:
        sock.settimeout(TIMEOUT)
        with contextlib.suppress(OSError, ValueError, struct.error):
            header, payload = _receive(sock)
            if not hmac.compare_digest(str(header.pop("token", "")), self.token):
                log.warning("the driver's inbox refused a request without this run's token")
                _send(sock, {"error": "refused: not this run's token"})
                return
            handler = self.handlers.get(str(header.get("op")))
            if handler is None:
                _send(sock, {"error": f"the driver's inbox has no operation {header.get('op')!r}"})
                return
            try:
                answer, data = handler(header, payload)
            except Exception as exc:  # the task fails with it; the driver goes on
                log.debug("inbox %s failed: %s", header.get("op"), exc)
                _send(sock, {"error": str(exc)})
                return
            _send(sock, answer, data)

    def __enter__(self) -> Inbox:
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


def native_dir(plan: Plan, stage: StageConfig) -> Path:
    """A native stage's own folder on the driver (its ``ctx.checkpoint``)."""
    from etlstage.spark.checkpoint import own_path

    return own_path(plan.config, "native", stage.name)


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

    inbox: InboxAddress
    stage: str

    def __call__(self, name: str, data: bytes | None) -> bytes | None:
        header = {"stage": self.stage, "name": name, "peek": data is None}
        answer, held = self.inbox.call("once", header, data or b"")
        return held if answer.get("found") else None

    def to_option(self) -> str:
        """As a data source option (JSON), for a native source whose options are strings."""
        i = self.inbox
        return json.dumps({"host": i.host, "port": i.port, "token": i.token, "stage": self.stage})

    @classmethod
    def from_option(cls, text: str) -> KeepOnce | None:
        if not text:
            return None
        doc = json.loads(text)
        return cls(InboxAddress(str(doc["host"]), int(doc["port"]), str(doc["token"])), str(doc["stage"]))


def driver_inbox(plan: Plan, bind: str, advertise: str) -> Inbox:
    """The inbox of ``plan``'s run: what each request does in the driver's folders."""
    from etlstage.spark.checkpoint import owner_only, private_folder
    from etlstage.spark.tally import Tally, tally_dir, write
    from etlstage.state.store import StateStore

    config = plan.config

    def deadletter(header: dict[str, Any], payload: bytes) -> tuple[dict[str, Any], bytes]:
        store = StateStore(config.state_dir, config.source)
        try:
            args = (str(header["stage"]), int(header["attempts"]), str(header["error"]), payload)
            put = store.set_aside if header.get("log") else store.add_deadletter
            ident = put(*args, int(header["messages"]), int(header["eom"]))
        finally:
            store.close()
        return {"id": ident}, b""

    def tally(header: dict[str, Any], payload: bytes) -> tuple[dict[str, Any], bytes]:
        write(tally_dir(config, plan.run_id), Tally.from_json(payload.decode()), str(header["owner"]))
        return {}, b""

    def count(header: dict[str, Any], payload: bytes) -> tuple[dict[str, Any], bytes]:
        name = str(header["name"])
        if not COUNT_NAME.match(name):
            raise PipelineError(f"not a window count's name: {name!r}")
        folder = private_folder(plan.counts_dir(config.stage(str(header["stage"]))))
        with open(folder / name, "w", opener=owner_only) as f:
            f.write(str(int(header["n"])))
        return {}, b""

    def spool(header: dict[str, Any], payload: bytes) -> tuple[dict[str, Any], bytes]:
        return read_piece(plan.spool_dir(config.stage(str(header["stage"]))), header)

    def once(header: dict[str, Any], payload: bytes) -> tuple[dict[str, Any], bytes]:
        path = native_dir(plan, config.stage(str(header["stage"]))) / relative(str(header["name"]))
        if header.get("peek"):
            return ({"found": True}, path.read_bytes()) if path.exists() else ({"found": False}, b"")
        return {"found": True}, keep_once(path, payload)

    handlers: dict[str, Handler] = {
        "deadletter": deadletter,
        "tally": tally,
        "count": count,
        "spool": spool,
        "once": once,
    }
    return Inbox(handlers, bind, advertise)


__all__ = ["Inbox", "InboxAddress", "KeepOnce", "driver_inbox", "keep_once", "native_dir", "read_piece"]
