"""The logger librdkafka writes to, with its repeats counted, not all shown.

librdkafka logs every failed attempt to reach a broker (about 20 lines a second against
a closed port, each at ERROR): an unreachable broker would bury everything else in the
log. The project's filter for repeated warnings (:class:`etlstage.logs.RepeatedWarnings`)
does the counting, told two things of its own here: librdkafka's lines count at every
level, and two lines are alike when their text is, numbers aside ("after 0ms", "after
3ms"; librdkafka's own "N identical error(s) suppressed" too) — librdkafka logs every
line through one template. The first of a kind goes through, then one a minute saying
how many like it were held back, and at exit a count of the rest.
"""

from __future__ import annotations

import atexit
import logging
import re
import threading
import time
from collections.abc import Callable

from etlstage.logs import RepeatedWarnings

REPEAT_WINDOW_S = 60.0
_NUMBERS = re.compile(r"\d+")
_SUPPRESSED = re.compile(r", \d+ identical error\(s\) suppressed")  # librdkafka's own count


class LibrdkafkaRepeats(RepeatedWarnings):
    def __init__(self, every: float = REPEAT_WINDOW_S, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__(first=1, every=every, clock=clock)
        self._lock = threading.Lock()  # librdkafka's lines may come from its own threads

    def counts(self, record: logging.LogRecord) -> bool:
        return True

    def kind(self, record: logging.LogRecord) -> tuple[str, str]:
        text = _NUMBERS.sub("N", _SUPPRESSED.sub("", record.getMessage()))
        return record.name, f"{record.levelname} {text}"

    def filter(self, record: logging.LogRecord) -> bool:
        with self._lock:
            return super().filter(record)


def client_logger() -> logging.Logger:
    """The logger to hand librdkafka's clients (``Consumer(conf, logger=...)``)."""
    logger = logging.getLogger("etlstage.kafka.librdkafka")
    if not any(isinstance(f, LibrdkafkaRepeats) for f in logger.filters):
        repeats = LibrdkafkaRepeats()
        logger.addFilter(repeats)
        atexit.register(repeats.report_pending, logger)  # what was held back, before the process ends
    return logger
