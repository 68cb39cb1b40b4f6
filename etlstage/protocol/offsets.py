"""Offset policies for supervisor-managed cyclic E-stages.

Each window's request is ``{"start": S, "end": E}`` where ``S`` is the end of the window
before it (the last committed end after a restart).

* ``counter``: integers, ``E = S + step``; always available.
* ``time``: ISO-8601 instants (UTC, ``Z``), ``E = S + step`` with ``step`` an ISO-8601
  duration (``PT5M``) or seconds; a window is available once ``E <= now - lag``.

>>> CounterPolicy(0, 100).window(200)
(200, 300)
>>> parse_duration("PT1H30M"), parse_duration("P1DT2S"), parse_duration(90)
(5400.0, 86402.0, 90.0)
"""

from __future__ import annotations

import datetime as dt
import re

from etlstage.errors import ConfigError

_DURATION = re.compile(
    r"^P(?:(?P<w>\d+(?:\.\d+)?)W)?(?:(?P<d>\d+(?:\.\d+)?)D)?"
    r"(?:T(?:(?P<h>\d+(?:\.\d+)?)H)?(?:(?P<m>\d+(?:\.\d+)?)M)?(?:(?P<s>\d+(?:\.\d+)?)S)?)?$"
)


def parse_duration(value: object, where: str = "duration") -> float:
    """Seconds from an ISO-8601 duration (``PT5M``, ``P1D``) or a number of seconds."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, str):
        m = _DURATION.match(value.strip().upper())
        if m and value.strip().upper() not in ("P", "PT"):
            parts = {k: float(v) for k, v in m.groupdict().items() if v}
            return (
                parts.get("w", 0) * 604800
                + parts.get("d", 0) * 86400
                + parts.get("h", 0) * 3600
                + parts.get("m", 0) * 60
                + parts.get("s", 0)
            )
    raise ConfigError([f"{where}: {value!r} is not an ISO-8601 duration such as PT5M or P1D, nor seconds"])


def parse_instant(value: object, where: str = "instant") -> dt.datetime:
    if isinstance(value, dt.datetime):
        return value if value.tzinfo else value.replace(tzinfo=dt.UTC)
    if isinstance(value, dt.date):
        return dt.datetime(value.year, value.month, value.day, tzinfo=dt.UTC)
    if isinstance(value, str):
        try:
            t = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            pass
        else:
            return t if t.tzinfo else t.replace(tzinfo=dt.UTC)
    raise ConfigError([f"{where}: {value!r} is not an ISO-8601 instant such as 2026-01-01T00:00:00Z"])


def format_instant(t: dt.datetime) -> str:
    return t.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S") + (f".{t.microsecond:06d}Z" if t.microsecond else "Z")


class CounterPolicy:
    def __init__(self, start: int, step: int) -> None:
        self.start = start
        self.step = step

    def first(self) -> object:
        return self.start

    def order(self, offset: object) -> int:
        """A sort key: later offsets sort after earlier ones."""
        return int(offset)  # type: ignore[call-overload]

    def window(self, start: object) -> tuple[object, object] | None:
        s = int(start)  # type: ignore[call-overload]
        return s, s + self.step

    def wait_seconds(self, start: object) -> float:
        return 0.0


class TimePolicy:
    def __init__(self, start: dt.datetime, step: float, lag: float) -> None:
        self.start = start
        self.step = dt.timedelta(seconds=step)
        self.lag = dt.timedelta(seconds=lag)

    def first(self) -> object:
        return format_instant(self.start)

    def order(self, offset: object) -> float:
        return parse_instant(offset).timestamp()

    def _end(self, start: object) -> tuple[dt.datetime, dt.datetime]:
        s = parse_instant(start)
        return s, s + self.step

    def window(self, start: object) -> tuple[object, object] | None:
        """The window starting at ``start``, or None while it is not yet over (plus lag)."""
        s, e = self._end(start)
        if e > dt.datetime.now(dt.UTC) - self.lag:
            return None
        return format_instant(s), format_instant(e)

    def wait_seconds(self, start: object) -> float:
        _, e = self._end(start)
        return max(0.0, (e + self.lag - dt.datetime.now(dt.UTC)).total_seconds())


def make_policy(kind: str, start: object, step: object, lag: object, where: str) -> CounterPolicy | TimePolicy:
    if kind == "counter":
        if not isinstance(start, int) or not isinstance(step, int) or step < 1:
            raise ConfigError(
                [f"{where}: a counter policy needs integer start and step >= 1, got start={start!r}, step={step!r}"]
            )
        return CounterPolicy(start, step)
    if kind == "time":
        try:
            policy = TimePolicy(
                parse_instant(start, f"{where}.start"),
                parse_duration(step, f"{where}.step"),
                parse_duration(lag or 0, f"{where}.lag"),
            )
            policy.start + policy.step - policy.lag, dt.datetime.now(dt.UTC) - policy.lag  # raise when out of range
        except OverflowError:
            raise ConfigError(
                [f"{where}: start {start!r}, step {step!r}, lag {lag!r}: the first window is out of the years 1-9999"]
            ) from None
        if policy.step <= dt.timedelta(0):
            raise ConfigError([f"{where}.step: {step!r} is no time: a time policy's windows need a step above 0"])
        return policy
    raise ConfigError([f"{where}.type: {kind!r}: expected counter or time"])
