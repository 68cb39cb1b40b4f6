"""The worker side of the protocol for Python workers.

:func:`serve` reads the scenario from ``ETLSTAGE_*``, then loops: read a chunk of stdin,
split it with :class:`~etlstage.protocol.framing.RequestParser`, call the user's code,
write results as whole blocks, flush once per chunk read.  Stray ``print`` output and
anything written to file descriptor 1 by libraries go to stderr: the protocol has its
own private copy of the original stdout.
"""

from __future__ import annotations

import contextlib
import io
import itertools
import json
import logging
import os
import sys
from collections.abc import Callable, Iterable
from concurrent.futures import Future
from typing import Any, BinaryIO

from etlstage.errors import ProtocolViolation
from etlstage.protocol.batchheader import parse_header
from etlstage.protocol.framing import EOB, Checked, RequestParser, check_messages
from etlstage.protocol.scenario import Scenario
from etlstage.protocol.vocabulary import Mode, StageType
from etlstage.worker.acks import PendingAcks
from etlstage.worker.base import Extractor, Loader, Request, Transformer, Worker, as_worker

CHUNK = 1 << 20
SLICE = 4096  # results taken at a time from a generator

log = logging.getLogger("etlstage.worker")


class _Output:
    """Results buffered as lists of messages, checked and written as blocks."""

    def __init__(self, stream: BinaryIO, scenario: Scenario) -> None:
        self._stream = stream
        self._markers = scenario.markers
        self._marker_list = list(scenario.markers.named())
        self._who = f"stage {scenario.stage!r} (output of its worker)"

    def messages(self, messages: Iterable[bytes]) -> None:
        """Check and write results: lists in one go, other iterables in slices (no per-message loop)."""
        if isinstance(messages, Checked) and messages.markers == self._markers and _intact(messages):
            self._stream.write(messages.block)  # encoded and checked for these markers already
            return
        if isinstance(messages, (list, tuple)):
            self._write(messages)
            return
        it = iter(messages)
        while batch := list(itertools.islice(it, SLICE)):
            self._write(batch)

    def _write(self, batch: list[bytes] | tuple[bytes, ...]) -> None:
        if not batch:
            return
        try:
            block = check_messages(batch, self._markers, self._who)
        except TypeError:
            bad = next(m for m in batch if not isinstance(m, bytes))
            raise TypeError(f"a worker result must be bytes, got {type(bad).__name__}: {bad!r:.80}") from None
        self._stream.write(block)

    def answers(self, w: Transformer, messages: list[bytes]) -> None:
        """Single mode, a transformer without reports: each message's results and EOP,
        checked and written as one block (the counts of the markers in the block tell
        whether a result holds one; only then is each answer checked on its own).  When
        the worker's code fails, the answers completed before are written first."""
        eom, eop = self._markers.EOM, self._markers.EOP
        end = eom + eop
        process = w.process_fn()
        done: list[list[bytes]] = []
        parts: list[bytes] = []
        try:
            for message in messages:
                results = process([message])
                if type(results) is not list:
                    results = list(results)
                if results:
                    try:
                        parts.append(eom.join(results))
                    except TypeError:
                        self._write(results)  # says which result is not bytes
                        raise
                    parts.append(end)
                else:
                    parts.append(eop)
                done.append(results)
        except BaseException:
            self._answered(done, parts)
            raise
        self._answered(done, parts)

    def _answered(self, done: list[list[bytes]], parts: list[bytes]) -> None:
        m = self._markers
        # The results alone, joined, hold no marker (a search for a byte is memchr; a count
        # or a translate of the framed block walks it byte by byte).
        joined = b"".join(itertools.chain.from_iterable(done))
        if not any(marker in joined for marker in self._marker_list):
            self._stream.write(b"".join(parts))  # whole answers only: each one's parts go in together
            return
        for results in done:  # a result holds a marker: the answers before it, then its error
            self._write(results)
            self.signal(m.EOP)

    def signal(self, byte: bytes) -> None:
        self._stream.write(byte)

    def flush(self) -> None:
        self._stream.flush()


def _reader(stream: BinaryIO) -> Callable[[], bytes]:
    read1 = getattr(stream, "read1", None)
    if read1 is not None:
        return lambda: read1(CHUNK)
    return lambda: stream.read(CHUNK)


def serve(
    worker: Worker | Callable[..., object] | type,
    *,
    kind: str | None = None,
    stdin: BinaryIO | None = None,
    stdout: BinaryIO | None = None,
    env: dict[str, str] | None = None,
    scenario: Scenario | None = None,
    stderr: Any = None,
) -> int:
    """Run a worker until stdin closes; return the exit status (0 on a clean end).

    With the default streams the process's stdin/stdout are used and stdout is
    protected from stray writes.  Streams given as arguments (tests, the in-memory
    harness) are used as they are, and ``print`` goes to stderr meanwhile.
    """
    scenario = scenario or Scenario.from_env(env)
    kind = kind or scenario.type
    w = as_worker(worker, kind)
    w.scenario = scenario

    if stdout is None:
        out_stream: BinaryIO = _protected_stdout()
        redirect = contextlib.nullcontext()
    else:
        out_stream = stdout
        redirect = contextlib.redirect_stdout(stderr or sys.stderr)  # type: ignore[assignment]
    in_stream = stdin if stdin is not None else io.FileIO(0, "rb", closefd=False)
    with redirect:
        w.setup()
        try:
            _loop(w, scenario, in_stream, _Output(out_stream, scenario))
        finally:
            w.teardown()
    return 0


def _intact(c: Checked) -> bool:
    """The block still holds exactly the list's messages (cheap: length and ends)."""
    if not c:
        return not c.block
    eom = len(c.markers.EOM)
    return len(c.block) == sum(map(len, c)) + eom * len(c) and c.block.endswith(c[-1] + c.markers.EOM)


def _protected_stdout() -> BinaryIO:
    """A private copy of fd 1 for the protocol; fd 1 itself then points at stderr."""
    sys.stdout.flush()
    fd = os.dup(1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return open(fd, "wb", buffering=CHUNK)


def _loop(w: Worker, sc: Scenario, stdin: BinaryIO, out: _Output) -> None:
    m = sc.markers
    if sc.type == StageType.E and sc.mode == Mode.PLAIN:
        out.messages(_extractor(w).extract(None))
        write_report(w)
        out.flush()
        return

    parser = RequestParser(m)
    read = _reader(stdin)
    acks = PendingAcks(stdin, lambda: _acknowledge(w, out, m.EOP), out.flush)
    try:
        _serve_requests(w, sc, read, parser, out, acks)
    finally:
        acks.close()


def _serve_requests(
    w: Worker, sc: Scenario, read: Callable[[], bytes], parser: RequestParser, out: _Output, acks: PendingAcks
) -> None:
    m = sc.markers
    batch: list[bytes] = []
    cycle = 0
    while True:
        acks.wait_for_input()
        chunk = read()
        if not chunk:
            acks.settle(keep=0)
            if batch or parser.pending_bytes:
                log.warning(
                    "stdin closed with an unfinished batch (%d messages, %d bytes): not processed; "
                    "the supervisor will send it again",
                    len(batch),
                    parser.pending_bytes,
                )
            return
        for token in parser.feed(chunk):
            if token is EOB:
                if sc.type == StageType.E or not sc.is_batch:
                    raise ProtocolViolation(f"EOB received by a {sc.type}-worker in {sc.mode} mode")
                if sc.batch_id and isinstance(w, Loader):
                    w.batch_id, batch = _batch_id(batch), batch[1:]
                _run_batch(w, batch, out, m.EOP, acks)
                out.flush()  # acknowledge now, not after the next batch (which may take long)
                batch = []
                continue
            assert isinstance(token, list)
            if sc.type == StageType.E:
                for raw in token:
                    request = Request.parse(raw, cycle)
                    e = _extractor(w)
                    if cycle > 0:
                        e.on_window_done(request)
                    out.messages(e.extract(request))
                    write_report(w)
                    out.signal(m.EOP)
                    out.flush()
                    cycle += 1
            elif not sc.is_batch:
                if isinstance(w, Transformer) and type(w).report is Worker.report:
                    out.answers(w, token)
                else:
                    for message in token:
                        _run_batch(w, [message], out, m.EOP, acks)
            elif sc.worker_driven:
                # messages may come written ahead of our BNCs: one BNC for each that leaves
                # the batch short, written together, then the answer once one fills it
                at = 0
                while at < len(token):
                    take = min(len(token) - at, sc.batch_size - len(batch))
                    batch.extend(token[at : at + take] if take < len(token) else token)
                    at += take
                    full = len(batch) >= sc.batch_size
                    if take - full:
                        acks.settle(keep=0)  # replies go in request order: earlier EOPs first
                        out.signal(m.BNC * (take - full))
                    if full:
                        _run_batch(w, batch, out, m.EOP, acks)
                        out.flush()
                        batch = []
            else:
                batch.extend(token)
        out.flush()


def _batch_id(batch: list[bytes]) -> str:
    """The id in a batch's header message (ETLSTAGE_BATCH_ID=1: the first of each batch)."""
    try:
        return parse_header(batch[0] if batch else b"")
    except ValueError as exc:
        raise ProtocolViolation(f"ETLSTAGE_BATCH_ID=1: {exc}") from None


def _run_batch(w: Worker, batch: list[bytes], out: _Output, eop: bytes, acks: PendingAcks) -> None:
    if not batch:
        acks.settle(keep=0)
        out.signal(eop)
        return
    if isinstance(w, Transformer):
        out.messages(w.process(batch))
    elif isinstance(w, Loader):
        acks.settle(keep=w.max_pending)
        pending = w.load(batch)
        if isinstance(pending, Future):
            acks.add(pending)  # acknowledged when it completes, in order
            return
        acks.settle(keep=0)
    else:
        raise TypeError(f"a T- or L-stage needs a Transformer or Loader, got {type(w).__name__}")
    _acknowledge(w, out, eop)


def _acknowledge(w: Worker, out: _Output, eop: bytes) -> None:
    write_report(w)
    out.signal(eop)


def write_report(w: Worker) -> None:
    """The worker's counters, written atomically before the batch is acknowledged."""
    counters = w.report()
    state_dir = getattr(getattr(w, "scenario", None), "state_dir", "")
    if counters is None or not state_dir:
        return
    write_report_file(state_dir, w.scenario.instance, os.getpid(), counters)


def write_report_file(state_dir: str, instance: int, pid: int, counters: dict[str, Any]) -> None:
    """``report-<instance>-<pid>.json`` in ``state_dir``, replaced atomically: what the
    engines show as the stage's report for the run whose processes include ``pid``."""
    path = os.path.join(state_dir, f"report-{instance}-{pid}.json")
    with open(path + ".tmp", "w", encoding="utf-8") as f:
        json.dump(counters, f)
    os.replace(path + ".tmp", path)


def main(
    worker: Worker | Callable[..., object] | type,
    *,
    kind: str | None = None,
    app: str | None = None,
    log_format: str | None = None,
    log_level: str | None = None,
    syslog_address: str | None = None,
) -> None:
    """Entry point for a worker script: logging set up, errors reported, exit status.

    Exit status: 0 clean end, 1 the worker's own code failed, 2 bad run instruction
    (configuration), 3 protocol violation by the supervisor's input.
    """
    from etlstage.logs import setup_logging

    name = app or os.path.basename(sys.argv[0]) or "worker"
    setup_logging(name, log_format, level=log_level, syslog_address=syslog_address)
    try:
        code = serve(worker, kind=kind)
    except BaseException as exc:  # every ending gets its exit status (SystemExit goes on up)
        code = exit_status(exc, name)
    sys.exit(code)


def exit_status(exc: BaseException, name: str = "worker") -> int:
    """The exit status for how a worker ended, logged: 1 its own code failed (or the
    supervisor closed our stdout), 2 bad run instruction, 3 protocol violation in its
    input, 130 interrupted.  Anything else (SystemExit) goes on up."""
    from etlstage.errors import EtlstageError

    if isinstance(exc, KeyboardInterrupt):
        return 130
    if isinstance(exc, BrokenPipeError):
        log.error("%s: the supervisor closed our stdout; stopping", name)
        return 1
    if isinstance(exc, ProtocolViolation):
        log.error("%s: protocol violation: %s", name, exc)
        return 3
    if isinstance(exc, EtlstageError):
        log.error("%s: %s", name, exc)
        return exc.exit_code
    if isinstance(exc, Exception):  # the worker's own code: say what failed, then the traceback
        log.error("%s failed: %s: %s", name, type(exc).__name__, exc, exc_info=exc)
        return 1
    raise exc


def run_extractor(fn: Callable[[Request | None], Iterable[bytes]]) -> None:
    main(fn, kind="E")


def run_transformer(fn: Callable[[list[bytes]], Iterable[bytes]]) -> None:
    main(fn, kind="T")


def run_loader(fn: Callable[[list[bytes]], object]) -> None:
    main(fn, kind="L")


def _extractor(w: Worker) -> Extractor:
    """An E-stage runs an Extractor; anything else is the author's mistake, said plainly."""
    if not isinstance(w, Extractor):
        raise TypeError(f"an E-stage needs an Extractor, got {type(w).__name__}")
    return w
