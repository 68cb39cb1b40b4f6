"""Retries with the RDSS exponential backoff, and the per-shard GetRecords rate limit.

RDSS "Network Failure Behaviour": before try ``n`` (n = 1..10) sleep ``2^n x 100 ms``;
after the tenth failure log GENERR010 and give up.  botocore's own retries are switched
off (see :mod:`.client`) so this is the one policy in force.
"""

from __future__ import annotations

import collections
import logging
import time
from collections.abc import Callable
from typing import TypeVar

from botocore.exceptions import ClientError, ConnectionClosedError, EndpointConnectionError, ReadTimeoutError

from etlstage.errors import EtlstageError

log = logging.getLogger("etlstage.kinesis")

T = TypeVar("T")

THROTTLING = {
    "ProvisionedThroughputExceededException",
    "LimitExceededException",
    "ThrottlingException",
    "KMSThrottlingException",
}
TRANSIENT = {"InternalFailure", "InternalFailureException", "ServiceUnavailable", "ServiceUnavailableException"}
NETWORK = (EndpointConnectionError, ConnectionClosedError, ReadTimeoutError, ConnectionError)


class KinesisGaveUp(EtlstageError):
    """A Kinesis call still failed after every retry (RDSS error code GENERR010)."""


def error_code(exc: BaseException) -> str:
    if isinstance(exc, ClientError):
        return str(exc.response.get("Error", {}).get("Code", ""))
    return ""


class Backoff:
    """``call(what, fn)``: run ``fn``, retrying throttling, 5xx and network errors."""

    def __init__(
        self, base_ms: float = 100.0, max_tries: int = 10, sleep: Callable[[float], None] = time.sleep
    ) -> None:
        self.base_ms = base_ms
        self.max_tries = max_tries
        self.sleep = sleep
        self.retries = 0  # total, for tests and stats

    def call(self, what: str, fn: Callable[[], T]) -> T:
        tries = 0
        while True:
            try:
                return fn()
            except Exception as exc:
                code = error_code(exc)
                if not (code in THROTTLING or code in TRANSIENT or isinstance(exc, NETWORK)):
                    raise
                tries += 1
                if tries > self.max_tries:
                    log.error("[GENERR010] %s still failing after %d retries: %s", what, self.max_tries, exc)
                    raise KinesisGaveUp(
                        f"GENERR010: {what} failed {tries} times ({code or type(exc).__name__}: {exc}); "
                        f"gave up after {self.max_tries} retries with exponential backoff"
                    ) from exc
                delay = (2**tries) * self.base_ms / 1000.0
                self.retries += 1
                log.warning(
                    "%s: %s; retry %d/%d in %.1f s", what, code or type(exc).__name__, tries, self.max_tries, delay
                )
                self.sleep(delay)


class RateLimit:
    """At most ``per_second`` calls in any one-second window (one instance per shard)."""

    def __init__(
        self,
        per_second: int = 5,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.per_second = per_second
        self._calls: collections.deque[float] = collections.deque(maxlen=per_second)
        self._clock = clock
        self._sleep = sleep

    def wait(self) -> None:
        if len(self._calls) == self.per_second:
            ready = self._calls[0] + 1.0
            now = self._clock()
            if now < ready:
                self._sleep(ready - now)
        self._calls.append(self._clock())
