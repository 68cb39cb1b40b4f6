"""Prometheus metrics of a running pipeline, read from its counters when scraped.

A custom collector: nothing is updated on the message path; each scrape turns one
snapshot (see :mod:`etlstage.observe.live`) into metric families.  Names follow the
Prometheus conventions: ``etlstage_`` prefix, base units (seconds, bytes), ``_total``
for counters, labels ``pipeline``, ``stage`` and ``instance``.  docs/operating.md lists
them all.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable, Iterator
from typing import TypeGuard

from prometheus_client import CollectorRegistry
from prometheus_client.metrics_core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    InfoMetricFamily,
    Metric,
)

from etlstage import __version__
from etlstage.kit.stats import OUTPUT
from etlstage.observe.document import PIPELINE_STATES, CheckpointDoc, LatencyDoc, SourceDoc, StageDoc
from etlstage.observe.live import Snapshot


class _Families:
    """Metric families by name, created on first use, so every sample of a name shares one."""

    def __init__(self) -> None:
        self.by_name: dict[str, Metric] = {}
        self.labels: dict[str, list[str]] = {}

    def counter(self, name: str, doc: str, labels: list[str]) -> CounterMetricFamily:
        if name not in self.by_name:
            self.by_name[name], self.labels[name] = CounterMetricFamily(name, doc, labels=labels), labels
        fam = self.by_name[name]
        assert isinstance(fam, CounterMetricFamily)
        return fam

    def gauge(self, name: str, doc: str, labels: list[str]) -> GaugeMetricFamily:
        if name not in self.by_name:
            self.by_name[name], self.labels[name] = GaugeMetricFamily(name, doc, labels=labels), labels
        fam = self.by_name[name]
        assert isinstance(fam, GaugeMetricFamily)
        return fam


# (metric, help, key in the live stage document); all counters, labels pipeline and stage
_STAGE_COUNTERS = (
    ("etlstage_stage_input_messages", "Messages a T- or L-stage took in (0 for E).", "in"),
    ("etlstage_stage_output_messages", "Messages a stage's workers produced (E: extracted; T: results).", "out"),
    ("etlstage_stage_input_bytes", "Bytes of the messages a T- or L-stage took in (markers included).", "bytes_in"),
    (
        "etlstage_stage_output_bytes",
        "Bytes of the messages a stage's workers produced (markers included).",
        "bytes_out",
    ),
    (
        "etlstage_stage_requests",
        "Jobs a stage's workers answered: batches, cycles, or single-mode requests written in one go.",
        "jobs",
    ),
    ("etlstage_stage_restarts", "Worker restarts after a failure (crash, timeout, protocol violation).", "restarts"),
    ("etlstage_stage_deadletter_messages", "Messages this run wrote to the dead-letter store.", "deadletters"),
)


# (metric, help, key in a stage's ``instances`` records); labels pipeline, stage, instance
_INSTANCE_COUNTERS = (
    ("etlstage_instance_input_messages", "Messages one worker instance took in (T, L), across its restarts.", "in"),
    ("etlstage_instance_output_messages", "Messages one worker instance produced (E, T), across its restarts.", "out"),
    ("etlstage_instance_restarts", "Restarts of one worker instance (Spark: of a partition's worker).", "restarts"),
)


def _histogram(fams: _Families, name: str, doc: str, names: list[str], labels: list[str], latency: LatencyDoc) -> None:
    hist = fams.by_name.setdefault(name, HistogramMetricFamily(name, doc, labels=names))
    assert isinstance(hist, HistogramMetricFamily)
    hist.add_metric(labels, buckets=[(b, float(n)) for b, n in latency["buckets"]], sum_value=latency["sum"])


class PipelineCollector:
    """A ``prometheus_client`` collector over ``snapshot()``, called once per scrape."""

    def __init__(self, snapshot: Callable[[], Snapshot]) -> None:
        self.snapshot = snapshot

    def describe(self) -> list[Metric]:
        return []  # names are known only from a snapshot; registering must not take one

    def collect(self) -> Iterator[Metric]:
        snap = self.snapshot()
        live, pipeline = snap.live, str(snap.live.get("pipeline", ""))
        fams = _Families()
        info = InfoMetricFamily("etlstage_build", "etlstage version of the supervisor.", labels=["pipeline"])
        info.add_metric([pipeline], {"version": __version__})
        fams.by_name["etlstage_build"] = info
        fams.gauge(
            "etlstage_pipeline_start_time_seconds", "When this supervisor run started (Unix time).", ["pipeline"]
        ).add_metric([pipeline], float(live["time"]) - float(live["elapsed"]))
        fams.gauge(
            "etlstage_pipeline_windows_in_flight", "Windows opened and not yet committed, all sources.", ["pipeline"]
        ).add_metric([pipeline], float(live["windows_in_flight"]))
        if "state" in live:
            state = fams.gauge(
                "etlstage_pipeline_state",
                "1 for the run's state (running; draining: stopping gracefully; failed: ending with an error).",
                ["pipeline", "state"],
            )
            for name in PIPELINE_STATES:
                state.add_metric([pipeline, name], float(live["state"] == name))
        for stage, st in live["stages"].items():
            _stage(fams, pipeline, stage, st)
        for src in live.get("sources", []):
            _source(fams, pipeline, src)
        for c in snap.status.get("checkpoints", []):
            _checkpoint(fams, pipeline, c)
        dl = snap.status.get("deadletters") or {}
        gauge = fams.gauge(
            "etlstage_deadletters", "Dead letters in the state store, by status (all runs).", ["pipeline", "status"]
        )
        gauge.add_metric([pipeline, "new"], float(dl.get("new", 0)))
        gauge.add_metric([pipeline, "any"], float(dl.get("total", 0)))
        yield from fams.by_name.values()


def registry(snapshot: Callable[[], Snapshot]) -> CollectorRegistry:
    """A registry with the pipeline's collector over ``snapshot``: what ``/metrics`` serves
    (:mod:`etlstage.observe.server`) and the export writes (:mod:`etlstage.observe.export`)."""
    reg = CollectorRegistry(auto_describe=False)
    reg.register(PipelineCollector(snapshot))
    return reg


def _stage(fams: _Families, pipeline: str, stage: str, st: StageDoc) -> None:
    labels = [pipeline, stage]
    for name, doc, key in _STAGE_COUNTERS:
        fams.counter(name, doc, ["pipeline", "stage"]).add_metric(labels, float(st[key]))  # type: ignore[literal-required]
    failures = fams.counter(
        "etlstage_stage_worker_failures",
        "Worker failures by reason: exit (crashed or exited), timeout, violation (of the protocol).",
        ["pipeline", "stage", "reason"],
    )
    for reason in ("exit", "timeout", "violation"):
        failures.add_metric([*labels, reason], float(st["failures"].get(reason, 0)))
    # figures the engine does not know (the Spark engine: its workers' queues) are absent: no sample
    if "in_flight" in st:
        fams.gauge(
            "etlstage_stage_requests_in_flight",
            "Requests written to a stage's workers and not yet answered.",
            ["pipeline", "stage"],
        ).add_metric(labels, float(st["in_flight"]))
    if "queued" in st:
        fams.gauge(
            "etlstage_stage_queued_messages", "Messages waiting in a stage's input buffer.", ["pipeline", "stage"]
        ).add_metric(labels, float(st["queued"]["messages"]))
        fams.gauge(
            "etlstage_stage_queued_bytes",
            "Bytes waiting in a stage's input buffer (bounded by buffer_bytes).",
            ["pipeline", "stage"],
        ).add_metric(labels, float(st["queued"]["bytes"]))
    if st["latency"]:
        _histogram(
            fams,
            "etlstage_stage_request_duration_seconds",
            "Time a worker took to answer a job: a batch, a cycle or requests written in one go.",
            ["pipeline", "stage"],
            labels,
            st["latency"],
        )
    for one in st.get("instances", []):
        il, names = [*labels, str(one["instance"])], ["pipeline", "stage", "instance"]
        # in and out are absent where the engine does not count them per instance (Spark)
        for name, doc, key in _INSTANCE_COUNTERS:
            if key in one:
                fams.counter(name, doc, names).add_metric(il, float(one[key]))  # type: ignore[literal-required]
    for w in st.get("workers", []):  # absent under the Spark engine: its workers are on the executors
        wl = [*labels, str(w["instance"])]
        fams.gauge(
            "etlstage_worker_resident_memory_bytes",
            "Resident memory of a worker's process tree.",
            ["pipeline", "stage", "instance"],
        ).add_metric(wl, float(w["rss"]))
        if (cpu_seconds := w["cpu_seconds"]) is not None:
            fams.counter(
                "etlstage_worker_cpu_seconds",
                "CPU time (user + system) of a worker's live process tree; restarts from 0 with a new worker.",
                ["pipeline", "stage", "instance"],
            ).add_metric(wl, float(cpu_seconds))
    for key, value in st["reports"].items():
        if key != OUTPUT:  # where the worker wrote: text, no figure
            _reported(fams, labels, key, value)


def _reported(fams: _Families, labels: list[str], key: str, value: object) -> None:
    """A worker-reported counter (SDK ``Worker.report``) as ``etlstage_reported_<key>``."""
    name, scale = reported_name(key)
    doc = f"Reported by the stage's workers as {key!r} (summed over this run's worker processes)."
    shape = ["pipeline", "stage", "key"] if isinstance(value, dict) else ["pipeline", "stage"]
    if fams.labels.setdefault(name, shape) != shape:
        return  # another stage reported this name in the other shape (number / named numbers): the first wins
    fam = fams.gauge(name, doc, shape)
    if isinstance(value, dict):
        for k, v in sorted(value.items()):
            if _number(v):
                fam.add_metric([*labels, str(k)], float(v) * scale)
    elif _number(value):
        fam.add_metric(labels, float(value) * scale)


def _number(v: object) -> TypeGuard[int | float]:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def reported_name(key: str) -> tuple[str, float]:
    """The metric name for a reported key, and the factor to base units.

    >>> reported_name("lag ms")
    ('etlstage_reported_lag_seconds', 0.001)
    >>> reported_name("duplicates skipped")
    ('etlstage_reported_duplicates_skipped', 1.0)
    >>> reported_name("Rows/Table")
    ('etlstage_reported_rows_table', 1.0)
    """
    base = re.sub(r"[^a-z0-9]+", "_", key.lower()).strip("_") or "value"
    scale = 1.0
    if base == "ms" or base.endswith("_ms"):
        base, scale = base[:-2].rstrip("_") + "_seconds", 0.001
        base = base.lstrip("_")
    return f"etlstage_reported_{base}", scale


def _source(fams: _Families, pipeline: str, src: SourceDoc) -> None:
    labels = [pipeline, src["stage"], str(src["instance"])]
    names = ["pipeline", "stage", "instance"]
    fams.counter(
        "etlstage_source_windows_opened",
        "Windows (cycles) an E-stage instance opened, numbered across runs.",
        names,
    ).add_metric(labels, float(src["windows_opened"]))
    fams.counter(
        "etlstage_source_windows_committed",
        "Windows of an E-stage instance loaded by every L-stage and committed, numbered across runs.",
        names,
    ).add_metric(labels, float(src["windows_committed"]))
    fams.gauge(
        "etlstage_source_windows_in_flight", "Windows of an E-stage instance opened and not yet committed.", names
    ).add_metric(labels, float(src["windows_in_flight"]))
    if "commit_latency" in src:
        _histogram(
            fams,
            "etlstage_source_end_to_end_latency_seconds",
            "Extracted to committed: from a window's opening (under Spark: its micro-batch's start) "
            "to its commit, once per window.",
            names,
            labels,
            src["commit_latency"],
        )


def _checkpoint(fams: _Families, pipeline: str, c: CheckpointDoc) -> None:
    stage, _, instance = str(c["source"]).partition("#")
    labels = [pipeline, stage, instance or "0"]
    names = ["pipeline", "stage", "instance"]
    if c["messages"] is not None:
        fams.counter(
            "etlstage_source_committed_messages",
            "Messages of committed windows, all runs (the checkpoint store).",
            names,
        ).add_metric(labels, float(c["messages"]))
    fams.gauge(
        "etlstage_source_last_commit_time_seconds",
        "When the E-stage instance last committed a window (Unix time).",
        names,
    ).add_metric(labels, float(c["updated_at"]))
    end = c.get("committed_end")
    if isinstance(end, (int, float)) and not isinstance(end, bool):
        fams.gauge(
            "etlstage_source_committed_offset", "The committed end of a counter offset policy.", names
        ).add_metric(labels, float(end))
    elif isinstance(end, str):
        try:
            when = dt.datetime.fromisoformat(end.replace("Z", "+00:00"))
        except ValueError:
            return
        if when.tzinfo is None:
            when = when.replace(tzinfo=dt.UTC)
        fams.gauge(
            "etlstage_source_committed_time_seconds",
            "The committed end of a time offset policy (Unix time): now minus this is the lag.",
            names,
        ).add_metric(labels, when.timestamp())
