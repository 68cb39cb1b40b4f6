"""Logging for the supervisor and every worker: ``text``, ``json`` or ``syslog``.

``syslog`` writes RFC 5424 lines the way the RDSS specification's Logging section asks::

    <134>1 2017-03-01T13:14:15.000Z host etlstage-0.1.0 848221 - - [INFO] Message sent.

(facility local0..local7, ``[LEVEL]`` first in the message, application name with its
version, the pid) — to stderr, or to a syslog socket with ``syslog_address``
(``/dev/log``, ``udp://host:514``).  Workers inherit the supervisor's choice through
``ETLSTAGE_LOG_FORMAT``, ``ETLSTAGE_LOG_LEVEL``, ``ETLSTAGE_SYSLOG_ADDRESS`` and
``ETLSTAGE_SYSLOG_FACILITY``.

Text from outside — names, worker stderr lines, anything a worker reported — is logged
with its control characters escaped (``\\n``, ``\\r``, ``\\x1b``; tabs stay), so it can
neither forge a log line nor drive the terminal: every string argument of a record is
escaped, and worker stderr lines are escaped where they are read.  A record of several
lines (an error report the supervisor wrote) keeps its own line breaks in ``text``; in
``syslog`` it is one line, ``json`` encodes it.

Repeated warnings are counted, not all shown (:class:`RepeatedWarnings`): the first few
of a kind — one logger, one message template, ``"Message %s to the %s queue: %s"`` —
then one every ``ETLSTAGE_LOG_REPEAT_SECONDS`` carrying how many were held back, and at
exit a count of the rest.  ``ETLSTAGE_LOG_REPEATS=0`` shows them all.

A worker's stderr line that is a JSON object (a worker logging with ``--log-format
json``) is relayed by a ``json`` log as an object (``"worker_log"``, with ``"source"`` the
worker and ``"message"`` its message), not as an escaped string.
"""

from __future__ import annotations

import atexit
import json
import logging
import logging.handlers
import os
import re
import socket
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TextIO

FORMATS = ("text", "json", "syslog")
FACILITIES = {f"local{i}": 16 + i for i in range(8)}
_SEVERITY = {"CRITICAL": 2, "ERROR": 3, "WARNING": 4, "INFO": 6, "DEBUG": 7}


# C0 controls but tab, DEL, C1 controls, and the Unicode line and paragraph separators.
_CONTROLS = re.compile("[\x00-\x08\x0a-\x1f\x7f-\x9f\u2028\u2029]")
_NAMED = {"\n": "\\n", "\r": "\\r"}


def _escape_one(m: re.Match[str]) -> str:
    c = m.group()
    return _NAMED.get(c) or (f"\\x{ord(c):02x}" if ord(c) < 0x100 else f"\\u{ord(c):04x}")


def escape_controls(text: str) -> str:
    """``text`` with control characters written as escapes (tabs kept): one printable line.

    >>> escape_controls("a\\nb\\r\\x1b[2Kc\\td")
    'a\\\\nb\\\\r\\\\x1b[2Kc\\td'
    """
    return _CONTROLS.sub(_escape_one, text)


class EscapeOutsideText(logging.Filter):
    """Escapes the control characters of every string argument of a record (see the module docstring)."""

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if isinstance(args, tuple):
            record.args = tuple(escape_controls(a) if isinstance(a, str) else a for a in args)
        elif isinstance(args, dict):
            record.args = {k: escape_controls(v) if isinstance(v, str) else v for k, v in args.items()}
        return True


class TextFormatter(logging.Formatter):
    """``time LEVEL logger: message``; no control character but the record's own line breaks and tabs."""

    def format(self, record: logging.LogRecord) -> str:
        return "\n".join(escape_controls(line) for line in super().format(record).split("\n"))


@dataclass
class _Kind:
    seen: int = 0
    held: int = 0  # not shown since the last shown one
    since: float = 0.0  # when the last one of the kind was shown
    last: logging.LogRecord | None = None  # the last one held back, formatted only if reported


class RepeatedWarnings(logging.Filter):
    """Shows the first ``first`` warnings of a kind, then one every ``every`` seconds with a count.

    A kind is a logger and a message template (``record.msg``, before its arguments), so
    ``log.warning("Message %s rejected: %s", id, why)`` for a thousand messages is one
    kind.  The shown one after a pause says how many like it were held back;
    :meth:`pending` tells what is held back at the end.  Other levels pass untouched.
    """

    SUMMARY = "etlstage_repeat_summary"  # set on the records this filter writes itself

    def __init__(self, first: int = 5, every: float = 30.0, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        self.first = first
        self.every = every
        self.clock = clock
        self.kinds: dict[tuple[str, str], _Kind] = {}

    def counts(self, record: logging.LogRecord) -> bool:
        """Whether ``record`` is one this filter counts (here: a warning)."""
        return record.levelno == logging.WARNING

    def kind(self, record: logging.LogRecord) -> tuple[str, str]:
        """What makes two records alike (here: the logger and the message template)."""
        return record.name, str(record.msg)

    def filter(self, record: logging.LogRecord) -> bool:
        if not self.counts(record) or getattr(record, self.SUMMARY, False) or hasattr(record, RELAYED):
            return True  # a worker's relayed line was counted by the worker's own logging, if at all
        kind = self.kinds.setdefault(self.kind(record), _Kind())
        now = self.clock()
        kind.seen += 1
        if kind.seen <= self.first:
            kind.since = now
            if kind.seen == self.first:
                record.msg = f"{record.msg} [more like this are counted: one shown every {self.every:g}s]"
            return True
        kind.held += 1
        if now - kind.since < self.every:
            kind.last = record
            return False
        record.msg = f"{record.msg} [1 of {kind.held} like this in the last {now - kind.since:.0f}s]"
        kind.held, kind.since = 0, now
        return True

    def pending(self) -> list[str]:
        """One line per kind with warnings held back since the last shown one."""
        # the last one held back as it would have read: a template's '%s%s' tells nothing
        return [
            f"{k.held} more warning(s) from {name} not shown, the last: "
            f"{escape_controls(k.last.getMessage() if k.last else template)!r}"
            for (name, template), k in self.kinds.items()
            if k.held
        ]

    def report_pending(self, logger: logging.Logger) -> None:
        for line in self.pending():
            logger.warning("%s", line, extra={self.SUMMARY: True})
        for k in self.kinds.values():
            k.held = 0


def repeated_warnings_from_env() -> RepeatedWarnings | None:
    """The filter as ``ETLSTAGE_LOG_REPEATS`` (default 5; 0: off) and ``ETLSTAGE_LOG_REPEAT_SECONDS`` (30) ask."""
    try:
        first = int(os.environ.get("ETLSTAGE_LOG_REPEATS") or 5)
        every = float(os.environ.get("ETLSTAGE_LOG_REPEAT_SECONDS") or 30)
    except ValueError as exc:
        raise ValueError(f"ETLSTAGE_LOG_REPEATS / ETLSTAGE_LOG_REPEAT_SECONDS: {exc}") from None
    return RepeatedWarnings(first, every) if first > 0 else None


def worker_record(label: str, text: str) -> dict[str, Any]:
    """``extra`` for relaying the stderr line ``text`` of worker ``label``: its JSON object, when the line is one."""
    if not text.startswith("{"):
        return {RELAYED: label}
    try:
        value = json.loads(text)
    except ValueError:
        return {RELAYED: label}
    return (
        {"worker_record": value, "worker_label": label, RELAYED: label} if isinstance(value, dict) else {RELAYED: label}
    )


# A worker's own text log line: its time, its level, the rest ("2026-12-02 01:01:57,592 INFO
# etlstage.rdss: ..." as this module writes it; ISO times, [LEVEL] and "level=" styles too)
_STAMPED = re.compile(
    r"^\[?\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?\]?\s+"
    r"(?:level=)?\[?(?P<level>TRACE|DEBUG|INFO|NOTICE|WARN|WARNING|ERROR|CRITICAL|FATAL)\]?:?\s+(?P<rest>.*)$",
    re.IGNORECASE,
)
_LEVELS = {"TRACE": logging.DEBUG, "NOTICE": logging.INFO, "WARN": logging.WARNING, "FATAL": logging.CRITICAL}


RELAYED = "etlstage_relayed"  # set on the records of a worker's stderr lines (their stage's label)


def worker_line(text: str) -> tuple[int, str]:
    """The level and text a worker's stderr line is relayed with: a line that carries its own
    time and level is shown once, at its level, without them (the relay's record has its
    time); any other line as it is, at INFO.

    >>> worker_line("2026-12-02 01:01:57,592 WARNING etlstage.rdss: late")
    (30, 'etlstage.rdss: late')
    >>> worker_line("plain words")
    (20, 'plain words')
    """
    m = _STAMPED.match(text)
    if m is None:
        return logging.INFO, text
    name = m["level"].upper()
    return _LEVELS.get(name) or logging.getLevelName(name), m["rest"]


def _iso(created: float) -> str:
    ms = int(created * 1000) % 1000
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(created)) + f".{ms:03d}Z"


class Rfc5424Formatter(logging.Formatter):
    """``<PRI>1 TIMESTAMP HOSTNAME APP-NAME PROCID - - [LEVEL] message``."""

    def __init__(self, app: str, facility: str = "local0") -> None:
        super().__init__()
        if facility not in FACILITIES:
            raise ValueError(f"syslog facility {facility!r}: expected one of local0..local7")
        self.app = app.replace(" ", "-")[:48] or "-"
        self.facility = FACILITIES[facility]
        self.host = socket.gethostname() or "-"

    def format(self, record: logging.LogRecord) -> str:
        pri = self.facility * 8 + _SEVERITY.get(record.levelname, 6)
        text = record.getMessage()
        if record.exc_info:
            text += " " + self.formatException(record.exc_info).replace("\n", " | ")
        text = escape_controls(text.replace("\n", " | "))  # one record, one line
        return (
            f"<{pri}>1 {_iso(record.created)} {self.host} {self.app} {record.process} - - [{record.levelname}] {text}"
        )


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        doc: dict[str, Any] = {
            "time": _iso(record.created),
            "level": record.levelname,
            "logger": record.name,
            "pid": record.process,
            "message": record.getMessage(),
        }
        for key in ("stage", "instance", "event"):
            if hasattr(record, key):
                doc[key] = getattr(record, key)
        relayed = getattr(record, "worker_record", None)
        if isinstance(relayed, dict):  # a worker's own JSON log line: an object, not an escaped string
            doc["source"] = getattr(record, "worker_label", None)
            doc["message"] = str(relayed.get("message", doc["message"]))
            doc["worker_log"] = relayed
        if record.exc_info:
            doc["exception"] = self.formatException(record.exc_info)
        return json.dumps(doc, ensure_ascii=False)


def _syslog_handler(address: str) -> logging.handlers.SysLogHandler:
    if address.startswith("udp://") or address.startswith("tcp://"):
        host, _, port = address[6:].rpartition(":")
        kind = socket.SOCK_DGRAM if address.startswith("udp") else socket.SOCK_STREAM
        return logging.handlers.SysLogHandler((host, int(port or 514)), socktype=kind)
    return logging.handlers.SysLogHandler(address)


class _RawSyslogHandler(logging.Handler):
    """Sends the already formatted RFC 5424 line (SysLogHandler would prefix its own PRI)."""

    def __init__(self, address: str) -> None:
        super().__init__()
        self._inner = _syslog_handler(address)

    def emit(self, record: logging.LogRecord) -> None:
        try:
            line = self.format(record).encode("utf-8", "replace")
            inner: Any = self._inner  # its socket attributes are not in the type stubs
            if inner.unixsocket:
                try:
                    inner.socket.send(line)
                except OSError:
                    inner.socket.close()
                    inner._connect_unixsocket(inner.address)
                    inner.socket.send(line)
            elif inner.socktype == socket.SOCK_DGRAM:
                inner.socket.sendto(line, inner.address)
            else:
                inner.socket.sendall(line + b"\n")
        except Exception:
            self.handleError(record)


def setup_logging(
    app: str,
    fmt: str | None = None,
    *,
    level: str | None = None,
    syslog_address: str | None = None,
    facility: str | None = None,
    stream: TextIO | None = None,
) -> logging.Logger:
    """Configure the root logger once for a process; arguments fall back to ``ETLSTAGE_*``.

    ``app`` is the application name; the version is appended for syslog
    (``etlstage-rdss-0.1.0``).
    """
    from etlstage import __version__

    fmt = fmt or os.environ.get("ETLSTAGE_LOG_FORMAT") or "text"
    if fmt not in FORMATS:
        raise ValueError(f"log format {fmt!r}: expected one of {', '.join(FORMATS)}")
    level = (level or os.environ.get("ETLSTAGE_LOG_LEVEL") or "INFO").upper()
    syslog_address = syslog_address or os.environ.get("ETLSTAGE_SYSLOG_ADDRESS") or None
    facility = facility or os.environ.get("ETLSTAGE_SYSLOG_FACILITY") or "local0"

    handler: logging.Handler
    if fmt == "syslog" and syslog_address:
        handler = _RawSyslogHandler(syslog_address)
    else:
        handler = logging.StreamHandler(stream or sys.stderr)
    if fmt == "syslog":
        handler.setFormatter(Rfc5424Formatter(f"{app}-{__version__}", facility))
    elif fmt == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(TextFormatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    handler.addFilter(EscapeOutsideText())
    repeats = repeated_warnings_from_env()
    if repeats is not None:
        handler.addFilter(repeats)
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)
    logger = logging.getLogger(app)
    if repeats is not None:
        atexit.register(repeats.report_pending, logger)  # what was held back, before the process ends
    return logger


def log_env(fmt: str | None, level: str | None, syslog_address: str | None, facility: str | None) -> dict[str, str]:
    """The ``ETLSTAGE_LOG_*`` variables that hand the supervisor's choice to workers."""
    env = {}
    if fmt:
        env["ETLSTAGE_LOG_FORMAT"] = fmt
    if level:
        env["ETLSTAGE_LOG_LEVEL"] = level
    if syslog_address:
        env["ETLSTAGE_SYSLOG_ADDRESS"] = syslog_address
    if facility:
        env["ETLSTAGE_SYSLOG_FACILITY"] = facility
    return env
