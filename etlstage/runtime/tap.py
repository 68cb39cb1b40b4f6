"""``etlstage tap``: the messages leaving a stage of a running pipeline, live, without disturbing it.

The supervisor listens on a Unix socket in the pipeline's state directory (owner-only,
0700; never /tmp, never an abstract socket) and serves a connecting process of its own
user only (``SO_PEERCRED``).  The client names a stage; from then on every block that
stage emits (an L-stage: every block it is given) is offered to that client's buffer.

Offering never waits: with no tap a block costs one dictionary look-up; with taps, one
append per tap.  A tap's buffer holds at most :data:`BUFFER_BYTES`; a block that does not
fit is dropped and counted, and the client is told how many it lost before the next
messages it gets.  Splitting blocks into messages and writing them happen in the tap's
own task, which waits for the client (``drain``) without holding anything up.

Wire format, one JSON object a line, server to client: ``{"ok": true, "stage": ..,
"type": ..}`` or ``{"error": ..}``, then ``{"message": TEXT}`` (the message's bytes as
UTF-8, undecodable bytes as ``\\xNN``), ``{"dropped": TOTAL}`` and, when the run ends,
``{"end": REASON}``.  Client to server: one line, ``{"stage": NAME}``.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import logging
import os
import socket
import struct
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from etlstage.config.model import PipelineConfig, StageConfig
from etlstage.errors import ConfigError, EtlstageError
from etlstage.hint import command
from etlstage.protocol.framing import split_block
from etlstage.protocol.markers import Markers
from etlstage.protocol.vocabulary import StageType

log = logging.getLogger("etlstage.tap")

SOCKET_NAME = "tap.sock"
BUFFER_BYTES = 64 * 1024  # per tap: message bytes waiting for a slow client (a tap is for eyes)
MAX_PATH = 107  # sun_path holds 108 bytes with its NUL
REQUEST_BYTES = 4096
REQUEST_TIMEOUT = 10.0


def socket_path(config: PipelineConfig) -> Path:
    return Path(config.state_dir) / SOCKET_NAME


def too_long(path: Path) -> str:
    """Why no socket can be at ``path`` (too long for one), or ""."""
    if len(os.fsencode(path)) > MAX_PATH:
        return f"its socket path {path} is longer than {MAX_PATH} bytes"
    return ""


def peer_uid(sock: socket.socket) -> int:
    """The user id of the process at the other end of a Unix socket (Linux ``SO_PEERCRED``)."""
    raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    return int(struct.unpack("3i", raw)[1])


@dataclass
class _Tap:
    stage: str
    markers: Markers
    blocks: collections.deque[tuple[bytes, int]] = field(default_factory=collections.deque)
    size: int = 0
    dropped: int = 0
    changed: asyncio.Event = field(default_factory=asyncio.Event)

    def offer(self, block: bytes, count: int) -> None:
        if self.blocks and self.size + len(block) > BUFFER_BYTES:
            self.dropped += count  # the client reads slower than the stage writes: its loss, not the run's
            return
        self.blocks.append((block, count))
        self.size += len(block)
        self.changed.set()

    def take(self) -> tuple[bytes, int]:
        block, count = self.blocks.popleft()
        self.size -= len(block)
        return block, count


class Taps:
    """The pipeline's taps by stage: :meth:`offer` on the message path, :meth:`serve` beside it."""

    def __init__(self, config: PipelineConfig) -> None:
        self.stages = {s.name: s for s in config.stages}
        self.path = socket_path(config)
        self.by_stage: dict[str, list[_Tap]] = {}
        self.server: asyncio.AbstractServer | None = None
        self.ended: str | None = None
        self._clients: set[asyncio.Task[None]] = set()

    def offer(self, stage: str, block: bytes, count: int) -> None:
        """A block of ``count`` messages leaves (or, for an L-stage, reaches) ``stage``; never waits."""
        taps = self.by_stage.get(stage)
        if taps:
            for t in taps:
                t.offer(block, count)

    async def serve(self) -> None:
        """Listen on the socket (replacing one a killed run left: this run holds the state)."""
        why = too_long(self.path)
        if why:
            log.info("no tap for this run: %s", why)
            return
        try:
            self.path.unlink()
        except FileNotFoundError:
            pass
        except OSError as exc:  # a folder of that name, say: the run goes on without a tap
            log.warning("no tap for this run: %s is in the way: %s", self.path, exc)
            return
        old = os.umask(0o177)  # the socket file 0600 from its creation (its folder is 0700 too)
        try:
            self.server = await asyncio.start_unix_server(self._client, path=str(self.path), limit=REQUEST_BYTES)
        except OSError as exc:
            log.warning("no tap for this run: cannot listen on %s: %s", self.path, exc)
        finally:
            os.umask(old)

    async def close(self, reason: str) -> None:
        """Tell every client the run ended (once their buffers are sent), then stop listening."""
        self.ended = reason
        for taps in self.by_stage.values():
            for t in taps:
                t.changed.set()
        if self.server is not None:
            self.server.close()
            with contextlib.suppress(FileNotFoundError):
                self.path.unlink()
        if self._clients:
            await asyncio.wait(self._clients, timeout=2.0)
        for task in self._clients:
            task.cancel()

    def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.ensure_future(self._converse(reader, writer))
        self._clients.add(task)
        task.add_done_callback(self._clients.discard)

    async def _converse(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        tap: _Tap | None = None
        try:
            sock = writer.get_extra_info("socket")
            if sock is None or peer_uid(sock) != os.getuid():
                return  # another user (root aside, who reads everything anyway): nothing said
            request = await asyncio.wait_for(reader.readline(), REQUEST_TIMEOUT)
            stage, error = self._stage_of(request)
            if error:
                await _send(writer, {"error": error})
                return
            config = self.stages[stage]
            tap = _Tap(stage, config.markers)
            self.by_stage.setdefault(stage, []).append(tap)
            log.info("tap on stage %r opened", stage)
            await _send(writer, {"ok": True, "stage": stage, "type": str(config.type)})
            await self._stream(tap, writer)
        except (OSError, TimeoutError, asyncio.IncompleteReadError, ValueError):
            pass  # the client went away or spoke nonsense: only its tap ends
        finally:
            if tap is not None:
                self.by_stage[tap.stage].remove(tap)
                log.info("tap on stage %r closed (%d message(s) dropped for it)", tap.stage, tap.dropped)
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()

    def _stage_of(self, request: bytes) -> tuple[str, str]:
        try:
            doc = json.loads(request)
            stage = doc["stage"]
        except (ValueError, KeyError, TypeError):
            return "", 'expected one line {"stage": NAME}'
        if stage not in self.stages:
            return "", f"no stage {stage!r} in this pipeline (its stages: {', '.join(self.stages)})"
        return str(stage), ""

    async def _stream(self, tap: _Tap, writer: asyncio.StreamWriter) -> None:
        told = 0
        while True:
            while not tap.blocks and self.ended is None:
                tap.changed.clear()
                await tap.changed.wait()
            if tap.dropped != told:
                told = tap.dropped
                await _send(writer, {"dropped": told})
            if not tap.blocks:  # the run ended and everything taken was sent
                await _send(writer, {"end": self.ended})
                return
            block, _ = tap.take()
            writer.write(b"".join(_lines(block, tap.markers)))
            await writer.drain()


def _lines(block: bytes, markers: Markers) -> Iterator[bytes]:
    for m in split_block(block, markers):
        yield _encode({"message": m.decode("utf-8", "backslashreplace")})


def _encode(doc: dict[str, object]) -> bytes:
    return json.dumps(doc, ensure_ascii=False).encode() + b"\n"


async def _send(writer: asyncio.StreamWriter, doc: dict[str, object]) -> None:
    writer.write(_encode(doc))
    await writer.drain()


# --- the client: etlstage tap -----------------------------------------------------------------


def connect(config: PipelineConfig, stage: str) -> tuple[BinaryIO, dict[str, object]]:
    """The running pipeline's tap on ``stage`` (read it with :func:`read_taps`) and its first answer."""
    path = socket_path(config)
    why = too_long(path)
    if why:
        raise EtlstageError(f"pipeline {config.name!r} has no tap: {why} (a shorter state_dir gives it one)")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(str(path))
    except (FileNotFoundError, ConnectionRefusedError):
        sock.close()
        raise EtlstageError(
            f"no running pipeline {config.name!r} to tap (nothing listens at {path}): start it with "
            f"{command('run', config.source)}"
        ) from None
    except OSError as exc:
        sock.close()
        raise EtlstageError(f"cannot reach the running pipeline at {path}: {exc}") from None
    if peer_uid(sock) != os.getuid():
        sock.close()
        raise EtlstageError(f"{path} is served by another user's process: not read")
    sock.sendall(_encode({"stage": stage}))
    stream = sock.makefile("rb")
    sock.close()  # the file keeps the connection open
    answer = json.loads(stream.readline() or b"{}")
    if not answer.get("ok"):
        stream.close()
        raise ConfigError([f"tap: {answer.get('error', 'the pipeline ended before it answered')}"])
    return stream, answer


def read_taps(stream: BinaryIO) -> Iterator[dict[str, object]]:
    """The documents the pipeline sends, until it ends or closes the connection."""
    with stream:
        for line in stream:
            yield json.loads(line)


def offered_as(stage: StageConfig) -> str:
    """What a tap on ``stage`` shows."""
    return "the messages given to it" if stage.type == StageType.L else "the messages it emits"


__all__ = ["BUFFER_BYTES", "Taps", "connect", "offered_as", "peer_uid", "read_taps", "socket_path"]
