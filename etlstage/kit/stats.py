"""Counters a stage keeps for the progress display, the summary, ``status`` and ``/metrics``.

Everything here is updated once per request, batch or cycle (never per message) and read
by whoever looks: the terminal table, the heartbeat ``etlstage status`` reads, the HTTP
endpoints.  A :class:`RateHistory` keeps a few minutes of samples for current rates and
the status page's charts.
"""

from __future__ import annotations

import bisect
import collections
import itertools
import json
import logging
import math
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from etlstage.errors import WorkerError, WorkerGone, WorkerTimeout
from etlstage.observe.document import StageDoc

# Request latency buckets in seconds: 1 ms to 10 min (a Spark write or a slow API call).
# fmt: off
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
                   2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 600.0)
# fmt: on
LAST_ERRORS = 5  # failures kept per stage for the status page

log = logging.getLogger("etlstage.stats")


class LatencyHistogram:
    """Cumulative-bucket histogram in the Prometheus sense, filled once per request."""

    __slots__ = ("counts", "sum")

    def __init__(self) -> None:
        self.counts = [0] * (len(LATENCY_BUCKETS) + 1)  # the last one is +Inf
        self.sum = 0.0

    def observe(self, seconds: float) -> None:
        self.counts[bisect.bisect_left(LATENCY_BUCKETS, seconds)] += 1
        self.sum += seconds

    @property
    def count(self) -> int:
        return sum(self.counts)

    @classmethod
    def sum_of(cls, histograms: Iterable[LatencyHistogram]) -> LatencyHistogram:
        """One histogram of the requests of several (the Spark engine's workers on executors)."""
        total = cls()
        for h in histograms:
            total.counts = [a + b for a, b in zip(total.counts, h.counts, strict=True)]
            total.sum += h.sum
        return total

    def cumulative(self) -> list[tuple[str, int]]:
        """``(upper bound, requests at or under it)`` for each bucket, ending with ``+Inf``."""
        out, running = [], 0
        for bound, n in zip((*(repr(b) for b in LATENCY_BUCKETS), "+Inf"), self.counts, strict=True):
            running += n
            out.append((bound, running))
        return out


def _is_number(value: object) -> bool:
    # json.loads reads NaN, Infinity and 1e400 as floats no JSON document may hold
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


# The report key a worker names where it wrote with (a path, a table, a topic; one or a
# list): the run's summary says where the data went (docs/writing-workers.md).
OUTPUT = "output"


def _add_counters(total: dict[str, Any], counters: object) -> bool:
    """Add a report's numbers (``{"name": 3, "section": {"name": 1}}``) to ``total``; False if
    it held anything else (a list, a string, deeper nesting), which is left out."""
    if not isinstance(counters, dict):
        return False
    clean = True
    for key, value in counters.items():
        if key == OUTPUT:  # where the worker wrote: text, not a counter
            places = [value] if isinstance(value, str) else value if isinstance(value, list) else None
            if places is None or not all(isinstance(p, str) for p in places):
                clean = False
                continue
            seen = total.setdefault(OUTPUT, [])
            seen.extend(p for p in places if p not in seen)
        elif isinstance(value, dict):
            numbers = {k: v for k, v in value.items() if _is_number(v)}
            section = total.get(key, {})
            if len(numbers) < len(value) or not isinstance(section, dict):
                clean = False
            if isinstance(section, dict) and (numbers or not value):  # an empty section is shown empty
                total[key] = section
                for k, v in numbers.items():
                    section[k] = section.get(k, 0) + v
        elif _is_number(value) and _is_number(total.get(key, 0)):
            total[key] = total.get(key, 0) + value
        else:
            clean = False
    return clean


def failure_reason(exc: WorkerError) -> str:
    """``exit``, ``timeout`` or ``violation``: why a worker had to be restarted."""
    if isinstance(exc, WorkerTimeout):
        return "timeout"
    if isinstance(exc, WorkerGone):
        return "exit"
    return "violation"


@dataclass
class InstanceCounts:
    """What one worker instance of a stage did in this run, across its restarts: a restarted
    instance's skew shows beside the others' (``etlstage_instance_*`` in ``/metrics``)."""

    messages_in: int = 0
    messages_out: int = 0
    restarts: int = 0


@dataclass
class StageStats:
    name: str
    type: str
    messages_in: int = 0
    messages_out: int = 0
    bytes_in: int = 0
    bytes_out: int = 0
    jobs: int = 0  # requests answered: batches, single-message requests, cycles
    in_flight: int = 0
    restarts: int = 0
    deadletters: int = 0
    resent: int = 0  # messages written to a worker again after a failure (at-least-once)
    withheld: int = 0  # results of those re-answers not handed on again: the same had gone on before
    started: float = field(default_factory=time.monotonic)
    workers: dict[int, Any] = field(default_factory=dict)  # instance -> Transport
    pids: list[int] = field(default_factory=list)  # every worker process of this run
    state_dir: str = ""
    latency: LatencyHistogram = field(default_factory=LatencyHistogram)
    failures: dict[str, int] = field(default_factory=dict)  # reason -> count
    last_errors: collections.deque[tuple[float, str]] = field(
        default_factory=lambda: collections.deque(maxlen=LAST_ERRORS)
    )
    instances: dict[int, InstanceCounts] = field(default_factory=dict)  # instance -> its own counts
    _measured: dict[int, tuple[int, float]] = field(default_factory=dict, repr=False)
    _measured_at: float = field(default=float("-inf"), repr=False)
    _odd_reports: set[Path] = field(default_factory=set, repr=False)  # report files already warned about

    def answered(self, seconds: float) -> None:
        """A job (a batch, a cycle, or single-mode requests written in one go) was answered
        ``seconds`` after the worker began on it."""
        self.jobs += 1
        self.latency.observe(seconds)

    def instance(self, i: int) -> InstanceCounts:
        counts = self.instances.get(i)
        if counts is None:
            counts = self.instances[i] = InstanceCounts()
        return counts

    def took(self, instance: int, messages: int, size: int) -> None:
        """Instance ``instance`` was given ``messages`` new messages, ``size`` bytes (T, L)."""
        self.messages_in += messages
        self.bytes_in += size
        self.instance(instance).messages_in += messages

    def produced(self, instance: int, messages: int, size: int) -> None:
        """Instance ``instance`` produced ``messages`` messages, ``size`` bytes (E, T)."""
        self.messages_out += messages
        self.bytes_out += size
        self.instance(instance).messages_out += messages

    def failed(self, exc: WorkerError, instance: int | None = None) -> None:
        """A worker failed and will be restarted (``instance``: which one, when known)."""
        self.restarts += 1
        if instance is not None:
            self.instance(instance).restarts += 1
        reason = failure_reason(exc)
        self.failures[reason] = self.failures.get(reason, 0) + 1
        self.last_errors.append((time.time(), exc.detail))

    def reports(self) -> dict[str, Any]:
        """The counters the stage's workers reported in this run (SDK ``Worker.report``), summed."""
        total: dict[str, Any] = {}
        base = Path(self.state_dir)
        # the stage's folder; under the Spark engine a stage of several partitions has one each
        found = [*base.glob("report-*.json"), *base.glob("partition-*/report-*.json")] if self.state_dir else []
        for path in found:
            pid = path.stem.rsplit("-", 1)[-1]
            if not pid.isdigit() or int(pid) not in self.pids:
                continue  # a process of an earlier run, or not a report
            try:
                counters = json.loads(path.read_text())
            except (OSError, ValueError):
                continue
            if not _add_counters(total, counters) and path not in self._odd_reports:
                self._odd_reports.add(path)
                log.warning(
                    "stage %s: %s holds more than finite numbers and sections of them: the rest is ignored",
                    self.name,
                    path,
                )
        return total

    def worker_resources(self) -> dict[int, tuple[int, float]]:
        """``instance -> (RSS bytes, CPU percent)`` of each live worker's process tree.

        Measured at most once a second, whoever asks (progress table, heartbeat, HTTP):
        psutil's CPU percent covers the time since its previous reading, so readings a
        moment apart would be noise.
        """
        now = time.monotonic()
        if now - self._measured_at >= 1.0:
            self._measured_at = now
            self._measured = {i: r for i, t in list(self.workers.items()) if (r := t.resources()) is not None}
        return self._measured

    def resources(self) -> tuple[int, float]:
        used = self.worker_resources().values()
        return sum(r[0] for r in used), sum(r[1] for r in used)

    def throughput(self) -> int:
        """The messages that measure this stage's progress: extracted (E) or taken in (T, L)."""
        return self.messages_out if self.type == "E" else self.messages_in


class RateHistory:
    """Samples of every stage's throughput counter, a few minutes long.

    ``sample`` is called every couple of seconds (the heartbeat); rates are differences
    between samples, so nothing is counted on the message path.
    """

    def __init__(self, span: float = 300.0, every: float = 2.0) -> None:
        self.samples: collections.deque[tuple[float, dict[str, int]]] = collections.deque(maxlen=int(span / every) + 1)

    def sample(self, stats: dict[str, StageStats], now: float | None = None) -> None:
        self.samples.append((time.monotonic() if now is None else now, {n: s.throughput() for n, s in stats.items()}))

    def rate(self, stage: str, over: float = 10.0) -> float:
        """Messages per second of ``stage`` over about the last ``over`` seconds."""
        if len(self.samples) < 2:
            return 0.0
        t1, last = self.samples[-1]
        t0, first = self.samples[-2]
        for t, counts in self.samples:  # the oldest sample within the span, if older than the last
            if t1 - t <= over + 1e-6:
                if t < t1:
                    t0, first = t, counts
                break
        return (last.get(stage, 0) - first.get(stage, 0)) / (t1 - t0) if t1 > t0 else 0.0

    def series(self, stage: str) -> list[tuple[float, float]]:
        """``(seconds ago, messages/s)`` between consecutive samples, oldest first."""
        pts = list(self.samples)
        if not pts:
            return []
        now = pts[-1][0]
        return [
            (round(now - t1, 1), round((c1.get(stage, 0) - c0.get(stage, 0)) / (t1 - t0), 1))
            for (t0, c0), (t1, c1) in itertools.pairwise(pts)
            if t1 > t0
        ]


def stage_document(stats: StageStats, history: RateHistory) -> StageDoc:
    """A stage's figures in the live document, the part both engines count alike; each
    engine adds what only it knows (``in_flight``, ``queued``, ``workers``... under the
    supervisor) and fills ``instances``."""
    return {
        "type": stats.type,
        "in": stats.messages_in,
        "out": stats.messages_out,
        "bytes_in": stats.bytes_in,
        "bytes_out": stats.bytes_out,
        "jobs": stats.jobs,
        "restarts": stats.restarts,
        "deadletters": stats.deadletters,
        "failures": dict(stats.failures),
        "last_errors": [{"at": at, "error": text} for at, text in stats.last_errors],
        "latency": {"buckets": stats.latency.cumulative(), "sum": round(stats.latency.sum, 6)},
        "reports": stats.reports(),
        "rate": round(history.rate(stats.name), 1),
        "history": history.series(stats.name),
        "instances": [],
    }
