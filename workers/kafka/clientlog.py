"""The logger librdkafka writes to, with its repeats collapsed.

librdkafka logs every failed attempt to reach a broker (about 20 lines a second against
a closed port, each at ERROR): an unreachable broker would bury everything else in the
log. The first line of a kind goes through; the same line again within ``REPEAT_WINDOW_S``
(numbers aside: "after 0ms", "after 3ms"; librdkafka's own "N identical error(s)
suppressed" too) is counted instead, and the next one after the window says how many
were left out.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Callable

REPEAT_WINDOW_S = 60.0
KINDS_REMEMBERED = 256  # distinct lines tracked at once; the oldest is forgotten first
_NUMBERS = re.compile(r"\d+")
_SUPPRESSED = re.compile(r", \d+ identical error\(s\) suppressed")  # librdkafka's own count


class RepeatsCollapsed(logging.Filter):
    def __init__(self, window_s: float = REPEAT_WINDOW_S, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        self._window_s = window_s
        self._clock = clock
        self._lock = threading.Lock()  # librdkafka logs from its own threads
        self._kinds: OrderedDict[tuple[int, str], list[float | int]] = OrderedDict()  # -> [shown at, left out]

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        kind = (record.levelno, _NUMBERS.sub("N", _SUPPRESSED.sub("", message)))
        now = self._clock()
        with self._lock:
            seen = self._kinds.get(kind)
            if seen is not None and now - seen[0] < self._window_s:
                seen[1] += 1
                return False
            self._kinds[kind] = [now, 0]
            self._kinds.move_to_end(kind)
            while len(self._kinds) > KINDS_REMEMBERED:
                self._kinds.popitem(last=False)
        if seen is not None and seen[1]:
            record.msg = f"{message} ({seen[1]} more like it in the last {now - seen[0]:.0f} s left out)"
            record.args = ()
        return True


def client_logger() -> logging.Logger:
    """The logger to hand librdkafka's clients (``Consumer(conf, logger=...)``)."""
    logger = logging.getLogger("etlstage.kafka.librdkafka")
    if not any(isinstance(f, RepeatsCollapsed) for f in logger.filters):
        logger.addFilter(RepeatsCollapsed())
    return logger
