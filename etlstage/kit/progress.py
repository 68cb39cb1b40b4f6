"""Progress while a pipeline runs, and the summary at its end.

On a terminal: a table redrawn in place every second.  Otherwise: one plain log line
per stage every ``interval`` seconds.
"""

from __future__ import annotations

import asyncio
import logging
import sys
import time
from collections.abc import Mapping, Sized
from typing import Protocol, TextIO

from etlstage.kit.stats import OUTPUT, StageStats
from etlstage.protocol.vocabulary import StageType

log = logging.getLogger("etlstage.progress")


class Opened(Protocol):
    """What an extractor has open: the supervisor's windows, the Spark engine's micro-batches."""

    @property
    def windows(self) -> Sized: ...


class Running(Protocol):
    """What the table and the summary read of a run, whichever engine runs it."""

    @property
    def started(self) -> float: ...  # time.monotonic() at the start
    @property
    def stats(self) -> Mapping[str, StageStats]: ...
    @property
    def sources(self) -> Mapping[str, Opened]: ...


def _rate(n: int, seconds: float) -> str:
    return f"{n / seconds:,.0f}/s" if seconds > 0 else "-"


def _mb(n: int) -> str:
    return f"{n / 1e6:,.0f} MB"


def table(pipeline: Running, live: bool = True) -> list[str]:
    elapsed = time.monotonic() - pipeline.started
    head = f"{'stage':<16} {'type':<4} {'in':>12} {'out':>12} {'rate':>12} {'in flight':>9} {'restarts':>8}"
    if live:
        head += f" {'rss':>8} {'cpu':>6}"
    rows = [head]
    for s in pipeline.stats.values():
        figures = _figures(s, elapsed, live)
        rows.append(f"{s.name:<16} {s.type:<4} " + " ".join(v.rjust(WIDTHS[k]) for k, v in figures.items()))
    rows.append(
        f"windows in flight: {sum(len(src.windows) for src in pipeline.sources.values())}   elapsed: {elapsed:,.1f}s"
    )
    if live:  # what the workers report (per-shard lag, outcomes), refreshed as they write it
        rows.extend(counter_lines(pipeline))
    return rows


def counter_lines(pipeline: Running) -> list[str]:
    lines = []
    for s in pipeline.stats.values():
        counters = {k: v for k, v in s.reports().items() if k != OUTPUT}
        if counters:
            lines.append(f"{s.name}: " + ", ".join(_counter(k, v) for k, v in counters.items()))
    return lines


def output_lines(pipeline: Running) -> list[str]:
    """Where each L-stage's worker says it wrote (its report's ``output``), for the end of a run."""
    lines = []
    for s in pipeline.stats.values():
        if s.type != StageType.L:
            continue
        places = s.reports().get(OUTPUT)
        if places:
            lines.append(f"stage {s.name!r} loaded into: {', '.join(places)}")
        else:
            lines.append(
                f"stage {s.name!r} loaded {s.messages_in:,} message(s); its worker does not say where "
                f'(a report {{"{OUTPUT}": ...}} names it)'
            )
    return lines


# The figures of a stage's row, by name, and each one's column width in the table.
WIDTHS = {"in": 12, "out": 12, "rate": 12, "in flight": 9, "restarts": 8, "rss": 8, "cpu": 6}


def _figures(s: StageStats, elapsed: float, live: bool) -> dict[str, str]:
    """One stage's figures, formatted, for the table and for the named log lines alike."""
    n = s.messages_out if s.type == StageType.E else s.messages_in
    figures = {
        "in": f"{s.messages_in:,}",
        "out": f"{s.messages_out:,}",
        "rate": _rate(n, elapsed),
        "in flight": str(s.in_flight),
        "restarts": str(s.restarts),
    }
    if live:
        rss, cpu = s.resources()
        figures["rss"] = _mb(rss)
        figures["cpu"] = f"{cpu:.0f}%"
    return figures


def progress_lines(pipeline: Running, live: bool = True) -> list[str]:
    """The table as log lines, each figure with its name (no terminal to hold the header);
    ``live``: with the workers' memory and CPU (the supervisor's, not the Spark engine's)."""
    elapsed = time.monotonic() - pipeline.started
    lines = []
    for s in pipeline.stats.values():
        figures = _figures(s, elapsed, live)
        lines.append(f"progress {s.name} ({s.type}): " + ", ".join(f"{k} {v}" for k, v in figures.items()))
    windows = sum(len(src.windows) for src in pipeline.sources.values())
    lines.append(f"progress windows in flight {windows}, elapsed {elapsed:,.1f}s")
    if live:
        lines.extend(f"progress {line}" for line in counter_lines(pipeline))
    return lines


async def report(pipeline: Running, stream: TextIO | None = None, interval: float = 10.0) -> None:
    stream = stream or sys.stderr
    tty = stream.isatty()
    drawn = 0
    try:
        while True:
            await asyncio.sleep(1.0 if tty else interval)
            if tty:
                rows = table(pipeline)
                if drawn:
                    stream.write(f"\x1b[{drawn}F\x1b[J")
                stream.write("\n".join(rows) + "\n")
                stream.flush()
                drawn = len(rows)
            else:
                for line in progress_lines(pipeline):
                    log.info("%s", line)
    finally:
        if drawn:  # the summary replaces the live table
            stream.write(f"\x1b[{drawn}F\x1b[J")
            stream.flush()


def _counter(key: str, value: object) -> str:
    if isinstance(value, dict):
        inner = " ".join(f"{k} {v:,}" for k, v in sorted(value.items()))
        return f"{key} ({inner})" if inner else f"{key} (none)"
    return f"{key} {value:,}" if isinstance(value, int) else f"{key} {value}"


def summary(pipeline: Running) -> str:
    elapsed = time.monotonic() - pipeline.started
    rows = table(pipeline, live=False)
    rows.extend(counter_lines(pipeline))
    extract = sum(s.messages_out for s in pipeline.stats.values() if s.type == StageType.E)
    dead = sum(s.deadletters for s in pipeline.stats.values())
    rows.append(
        f"extracted {extract:,} messages in {elapsed:,.2f}s ({_rate(extract, elapsed)})"
        + (f"; {dead:,} message(s) in the dead-letter store" if dead else "")
    )
    resent = resent_line(
        {name: s.resent for name, s in pipeline.stats.items()}, {name: s.jobs for name, s in pipeline.stats.items()}
    )
    if resent:
        rows.append(resent)
    withheld = {name: s.withheld for name, s in pipeline.stats.items() if s.withheld}
    if withheld:
        parts = ", ".join(f"{n:,} result(s) of stage {name!r}" for name, n in withheld.items())
        rows.append(f"not handed on again (the same results went on before the failure): {parts}")
    rows.extend(output_lines(pipeline))
    return "\n".join(rows)


def resent_line(resent: dict[str, int], answered: dict[str, int] | None = None) -> str:
    """Messages sent to a stage again after a worker failure, by stage ("" when none).

    ``answered``: requests each stage's workers answered; a stage whose workers never answered
    one was sent them again before any could have been passed on, so no caveat is due.

    >>> resent_line({"t": 12, "sink": 0})
    "sent again after a worker failure: 12 message(s) to stage 't' (a loader not idempotent may have them twice)"
    >>> resent_line({"t": 12}, {"t": 0})
    "sent again after a worker failure: 12 message(s) to stage 't'"
    """
    parts = [f"{n:,} message(s) to stage {name!r}" for name, n in resent.items() if n]
    if not parts:
        return ""
    worked = answered is None or any(answered.get(name, 1) for name, n in resent.items() if n)
    caveat = " (a loader not idempotent may have them twice)" if worked else ""
    return f"sent again after a worker failure: {', '.join(parts)}{caveat}"
