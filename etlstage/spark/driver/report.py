"""Counts per stage from Spark's progress events: the live display and the end-of-run summary.

Each source and each T-stage's output carries an observed row count
(``DataFrame.observe``); a T-stage's input is its upstream's output and every L-stage
receives the last level's output, so the counts add up as under the supervisor.  The
table and summary are the supervisor engine's too (:mod:`etlstage.kit.progress`).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from etlstage.config.model import PipelineConfig, StageConfig
from etlstage.kit.stats import LAST_ERRORS, InstanceCounts, LatencyHistogram, RateHistory, StageStats
from etlstage.spark.checkpoint import own_path
from etlstage.spark.driver.status import read_checkpoint
from etlstage.spark.tasks.tally import Tally, forget_other_runs, read_all, tally_dir

if TYPE_CHECKING:
    from pyspark.sql.streaming import StreamingQuery

log = logging.getLogger("etlstage.progress")


class _Batches:
    """Stands where the supervisor lists an extractor's windows: the micro-batches in flight."""

    def __init__(self) -> None:
        self.windows: list[int] = []


@dataclass
class Phase:
    """One phase of the Spark engine's start-up (monotonic seconds; ``ended`` None while it runs)."""

    name: str
    started: float
    ended: float | None = None

    def seconds(self, now: float) -> float:
        return (self.ended if self.ended is not None else now) - self.started


class Counts:
    """Every stage's counters under the Spark engine, updated from Spark's progress events
    (a listener thread), the sink's batch-count files and the workers' tallies; read by the
    progress display, the summary and the HTTP endpoints (:mod:`etlstage.spark.driver.live`)."""

    def __init__(self, config: PipelineConfig, run_id: str = "") -> None:
        self.config = config
        self.run_id = run_id
        self.stats = {s.name: StageStats(s.name, s.type) for s in config.stages}
        for s in config.stages:  # where the SDK's report files are (one folder per partition below)
            self.stats[s.name].state_dir = str(Path(config.state_dir) / "stages" / s.name)
        self.history = RateHistory()
        self.started = time.monotonic()  # the query's start (begin): the summary's rates count from here
        self.run_started = self.started  # never moved: the run's elapsed time counts from here
        self.phases: list[Phase] = []  # start-up, in order: JVM, session, pre-flight, data sources, query, first batch
        self.sources = {"micro-batches": _Batches()}
        self.batches = 0
        self._counted: set[int] = set()  # batch ids added: the listener and finish() may both bring one
        self.state = "running"  # draining once a stop is asked, failed when the run ends in error
        self.commit_latency = LatencyHistogram()  # a micro-batch's start to its commit
        self.lock = threading.RLock()  # progress events arrive on another thread than the readers
        self._observed: dict[str, int] = {}
        self._bytes: dict[str, int] = {}
        self._listener: Any = None
        self._dead_at_start = self._deadletters()
        self._sampled = 0.0
        self.native: list[str] = []  # stages that run as Spark itself: see adopt_reports
        self.no_query: str | None = None  # why the run started no query (the summary says it)

    @staticmethod
    def metric(stage: StageConfig) -> str:
        return f"etlstage_{stage.type}_{stage.name}"

    def adopt_reports(self, names: list[str]) -> None:
        """Native stages write their report (as a worker does) under this process's pid."""
        self.native = [n for n in names if n in self.stats]

    def begin(self) -> None:
        """The query starts now (rates and the summary's time count from here)."""
        self.started = time.monotonic()
        if self.run_id:
            forget_other_runs(self.config, self.run_id)

    def phase(self, name: str | None) -> None:
        """Start-up: the current phase (if any) ends now, logged with its duration; ``name`` begins."""
        now = time.monotonic()
        with self.lock:
            if self.phases and self.phases[-1].ended is None:
                done = self.phases[-1]
                done.ended = now
                log.info("start-up: %s took %.1fs", done.name, done.ended - done.started)
            if name is not None:
                self.phases.append(Phase(name, now))

    def startup(self) -> str:
        """The start-up phases so far, for the progress line and the summary."""
        now = time.monotonic()
        with self.lock:
            shown = [f"{p.name} {p.seconds(now):.1f}s{'' if p.ended else '…'}" for p in self.phases]
        return ", ".join(shown)

    # --- from Spark ----------------------------------------------------------------------------

    def listener(self) -> Any:
        if self._listener is None:
            from etlstage.spark.driver.listener import progress_listener

            self._listener = progress_listener(self.progress)
        return self._listener

    def progress(self, p: Any) -> None:
        """One micro-batch's progress: add its observed counts."""
        with self.lock:
            if p.batchId in self._counted:
                return
            self._counted.add(p.batchId)
            extracted = self._extracted()
            self.batches += 1
            if self.batches == 1:
                self.phase(None)  # the first micro-batch is committed: start-up is over
            with contextlib.suppress(AttributeError, KeyError, TypeError, ValueError):
                self.commit_latency.observe(int(p.durationMs["triggerExecution"]) / 1000)
            for name, row in (p.observedMetrics or {}).items():
                self._observed[name] = self._observed.get(name, 0) + int(row["rows"] or 0)
                with contextlib.suppress(KeyError, IndexError, ValueError):
                    self._bytes[name] = self._bytes.get(name, 0) + int(row["bytes"] or 0)
            fused = own_path(self.config, "batch-counts", f"{p.batchId}.json")
            with contextlib.suppress(OSError, ValueError):
                doc = json.loads(fused.read_text())
                # T-stages run in the sink's tasks; {"messages": .., "bytes": ..} (older runs: messages alone)
                messages, sizes = (doc["messages"], doc.get("bytes", {})) if "messages" in doc else (doc, {})
                for stage, n in messages.items():
                    key = self.metric(self.config.stage(stage))
                    self._observed[key] = self._observed.get(key, 0) + int(n)
                for stage, n in sizes.items():
                    key = self.metric(self.config.stage(stage))
                    self._bytes[key] = self._bytes.get(key, 0) + int(n)
                fused.unlink()
            self._update()
            log.debug(
                "micro-batch %s: %d messages extracted, %s rows, durations (ms) %s",
                p.batchId,
                self._extracted() - extracted,
                p.numInputRows,
                p.durationMs,
            )

    def _extracted(self) -> int:
        return sum(self._observed.get(self.metric(s), 0) for s in self.config.stages if s.type == "E")

    def _update(self) -> None:
        with self.lock:
            level_out = level_bytes = 0
            for s in self.config.stages:
                st = self.stats[s.name]
                if s.type == "E":
                    st.messages_out = self._observed.get(self.metric(s), 0)
                    st.bytes_out = self._bytes.get(self.metric(s), 0)
                    level_out += st.messages_out
                    level_bytes += st.bytes_out
            for s in self.config.stages:
                st = self.stats[s.name]
                if s.type == "T":
                    st.messages_in, st.bytes_in = level_out, level_bytes
                    st.messages_out = level_out = self._observed.get(self.metric(s), 0)
                    st.bytes_out = level_bytes = self._bytes.get(self.metric(s), 0)
                elif s.type == "L":
                    st.messages_in, st.bytes_in = level_out, level_bytes
            self.sources["micro-batches"].windows = read_checkpoint(self.config).in_flight
            dead = self._deadletters()
            for name, st in self.stats.items():
                st.deadletters = dead.get(name, 0) - self._dead_at_start.get(name, 0)
            self._tallies()
            for name in self.native:  # they report under this process's pid (no worker of theirs runs)
                if os.getpid() not in self.stats[name].pids:
                    self.stats[name].pids.append(os.getpid())

    def _tallies(self) -> None:
        """Restarts, failures, requests and worker pids as the executors reported them."""
        if not self.run_id:
            return
        found: dict[str, list[Tally]] = {}
        for t in read_all(tally_dir(self.config, self.run_id)):
            found.setdefault(t.stage, []).append(t)
        for name, tallies in found.items():
            st = self.stats.get(name)
            if st is None:
                continue
            each = [t.stats for t in tallies]
            st.restarts = sum(w.restarts for w in each)
            st.jobs = sum(w.jobs for w in each)
            st.failures = {}
            for w in each:
                for reason, n in w.failures.items():
                    st.failures[reason] = st.failures.get(reason, 0) + n
            st.last_errors.clear()
            st.last_errors.extend(sorted(e for w in each for e in w.last_errors)[-LAST_ERRORS:])
            st.latency = LatencyHistogram.sum_of(w.latency for w in each)
            st.pids = [pid for w in each for pid in w.pids]
            st.instances = {}  # a partition's worker is an instance; its messages are not counted apart
            for t in tallies:
                st.instances.setdefault(t.partition, InstanceCounts()).restarts += t.stats.restarts

    def _deadletters(self) -> dict[str, int]:
        from etlstage.state.store import StateStore

        if not (Path(self.config.state_dir) / StateStore.FILE).exists():
            return {}
        store = StateStore(self.config.state_dir)
        try:
            return store.deadletter_stage_counts()
        finally:
            store.close()

    def tick(self) -> None:
        """Every second from the driver's loop: workers' tallies, and a rate sample every 2 s."""
        now = time.monotonic()
        with self.lock:
            self._update()
            if now - self._sampled >= 2.0:
                self._sampled = now
                self.history.sample(self.stats, now)

    def finish(self, query: StreamingQuery | None) -> None:
        """Progress events reach the listener asynchronously, possibly after the query ended:
        the query's own record of its last batches is taken before the summary (each batch
        is added once, whichever brings it first)."""
        if query is not None:
            for p in query.recentProgress:
                self.progress(p)
        self._update()

    # --- to the user ---------------------------------------------------------------------------

    def reporter(self, enabled: bool, interval: float = 10.0) -> Callable[[], None]:
        from etlstage.kit.progress import progress_lines, table

        tty = sys.stderr.isatty()
        state = {"next": time.monotonic() + (1.0 if tty else interval), "drawn": 0}

        def tick() -> None:
            self.tick()
            if not enabled or time.monotonic() < state["next"]:
                return
            state["next"] = time.monotonic() + (1.0 if tty else interval)
            rows = table(self, live=False)
            if self.phases and self.phases[-1].ended is None:
                rows.append(f"start-up: {self.startup()}")
            if tty:
                if state["drawn"]:
                    sys.stderr.write(f"\x1b[{state['drawn']}F\x1b[J")
                sys.stderr.write("\n".join(rows) + "\n")
                sys.stderr.flush()
                state["drawn"] = len(rows)
            else:
                for line in progress_lines(self, live=False) + [f"progress {r}" for r in rows[len(self.stats) + 2 :]]:
                    log.info("%s", line)

        return tick

    def summary(self) -> str:
        from etlstage.kit.progress import summary

        now = time.monotonic()
        ran, total = now - self.started, now - self.run_started
        started = f"\nstart-up: {self.startup()}" if self.phases else ""
        query = f"no query: {self.no_query}" if self.no_query else f"query ran {ran:.2f}s"
        return (
            summary(self)
            + f"\nmicro-batches committed in this run: {self.batches}; {query}"
            + f"{started}\nthe run took {total:.2f}s in all, start-up included"
        )


__all__ = ["Counts"]
