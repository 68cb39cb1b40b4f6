"""The driver JVM's stderr, relayed into this process's log at a level per line.

Spark's JVM writes its log4j lines (``26/12/02 04:47:47 WARN Utils: …``) and the JVM's own
notes (``WARNING: Using incubator modules: …``) straight to stderr.  Started with its
stderr on a pipe (:func:`relay`), each line goes to the ``etlstage.spark.jvm`` logger
instead: at its own level, except what every start on every machine says and nobody can
act on (:data:`NOISE`), which goes at DEBUG — out of the terminal at the default level, in
the log with ``--log-level DEBUG``.  An exception's lines under the log line that reports
it go at DEBUG too, and a Python traceback inside a log line is cut there: the engine
reports the failure in its own words.  A worker's stderr line (``[stage#0] …``, as its task
relays it) goes at INFO, as the supervisor relays one; the JVM's own lines before any log
line go at WARNING.
"""

from __future__ import annotations

import logging
import re
import threading
from typing import IO

log = logging.getLogger("etlstage.spark.jvm")

# Said at every start (or by the defaults we keep), on any machine: nothing to act on.
NOISE = (
    "Using incubator modules",  # the JVM: Spark adds jdk.incubator.vector
    "resolves to a loopback address",  # Utils: a host whose name is 127.0.x.x (containers, VMs)
    "Set SPARK_LOCAL_IP if you need to bind to another address",
    "Unable to load native-hadoop library",  # NativeCodeLoader: the Java code is used, as it should
    "Using Spark's default log4j profile",
    'Setting default log level to "WARN"',
    "To adjust logging level use sc.setLogLevel",
    "Picked up JAVA_TOOL_OPTIONS",
    "Picked up _JAVA_OPTIONS",
    # SparkStringUtils, at a wide table's first MERGE: a plan's text for debugging was cut
    "Truncated the string representation of a plan since it was too large",
)
TRACEBACK = "Traceback (most recent call last):"
_LOG4J = re.compile(r"^\d\d/\d\d/\d\d \d\d:\d\d:\d\d (?P<level>TRACE|DEBUG|INFO|WARN|ERROR|FATAL) (?P<text>.*)$")
_LEVELS = {
    "TRACE": logging.DEBUG,
    "DEBUG": logging.DEBUG,
    "INFO": logging.INFO,
    "WARN": logging.WARNING,
    "ERROR": logging.ERROR,
    "FATAL": logging.CRITICAL,
}


class _Lines:
    """Levels line by line: a log4j line sets it, a line that is not one (its exception's) keeps it."""

    def __init__(self) -> None:
        self.level = logging.WARNING
        self.logged = False  # a log4j line came: what is not one is its exception's

    def level_of(self, line: str) -> tuple[int, str]:
        found = _LOG4J.match(line)
        if found:
            text = found["text"]
            self.level = logging.DEBUG if any(n in text for n in NOISE) else _LEVELS[found["level"]]
            self.logged = True
            head, traceback, _ = text.partition(TRACEBACK)
            return self.level, (head + "(a traceback: --log-level DEBUG shows it)") if traceback else text
        if line.startswith("["):  # a worker's stderr line, "[stage#0] ...": INFO, as the supervisor relays it
            return logging.INFO, line
        if any(n in line for n in NOISE) or self.logged:
            # an exception's lines under the log line that reports it (its frames, its message,
            # a Python traceback): the engine reports the failure in its own words
            return logging.DEBUG, line
        return self.level, line  # the JVM's own word before any log line: WARNING


def relay(stream: IO[bytes], name: str = "spark-jvm-stderr") -> threading.Thread:
    """Log each line of ``stream`` (the JVM's stderr) until it ends, on a daemon thread."""

    def pump() -> None:
        lines = _Lines()
        with stream:
            for raw in iter(stream.readline, b""):
                line = raw.decode("utf-8", "replace").rstrip("\r\n")
                if line.strip():
                    level, text = lines.level_of(line)
                    log.log(level, "%s", text)

    thread = threading.Thread(target=pump, name=name, daemon=True)
    thread.start()
    return thread


__all__ = ["NOISE", "relay"]
