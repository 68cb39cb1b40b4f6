"""Counts per stage from Spark's progress events: the live display and the end-of-run summary.

Each source and each T-stage's output carries an observed row count
(``DataFrame.observe``); a T-stage's input is its upstream's output and every L-stage
receives the last level's output, so the counts add up as under the supervisor.  The
table and summary are the supervisor engine's own (:mod:`etlstage.runtime.progress`).
"""

from __future__ import annotations

import contextlib
import json
import logging
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from etlstage.config.model import PipelineConfig, StageConfig
from etlstage.runtime.stats import StageStats

if TYPE_CHECKING:
    from pyspark.sql.streaming import StreamingQuery

    from etlstage.runtime.pipeline import Pipeline

log = logging.getLogger("etlstage.progress")


class _Batches:
    """Stands where the supervisor lists an extractor's windows: the micro-batch in flight."""

    def __init__(self) -> None:
        self.windows: list[int] = []


class Counts:
    def __init__(self, config: PipelineConfig) -> None:
        self.config = config
        self.stats = {s.name: StageStats(s.name, s.type) for s in config.stages}
        self.started = time.monotonic()
        self.sources = {"micro-batches": _Batches()}
        self.batches = 0
        self._observed: dict[str, int] = {}
        self._listener: Any = None
        self._dead_at_start = self._deadletters()

    @staticmethod
    def metric(stage: StageConfig) -> str:
        return f"etlstage_{stage.type}_{stage.name}"

    # --- from Spark ----------------------------------------------------------------------------

    def listener(self) -> Any:
        if self._listener is None:
            from pyspark.sql.streaming import StreamingQueryListener

            counts = self

            class Listener(StreamingQueryListener):
                def onQueryStarted(self, event: Any) -> None:
                    pass

                def onQueryProgress(self, event: Any) -> None:
                    counts.progress(event.progress)

                def onQueryIdle(self, event: Any) -> None:
                    pass

                def onQueryTerminated(self, event: Any) -> None:
                    pass

            self._listener = Listener()
        return self._listener

    def progress(self, p: Any) -> None:
        """One micro-batch's progress: add its observed counts."""
        self.batches += 1
        log.debug("micro-batch %s: %s rows, durations (ms) %s", p.batchId, p.numInputRows, p.durationMs)
        for name, row in (p.observedMetrics or {}).items():
            self._observed[name] = self._observed.get(name, 0) + int(row["rows"] or 0)
        fused = Path(self.config.engine.checkpoint) / "etlstage" / "batch-counts" / f"{p.batchId}.json"
        with contextlib.suppress(OSError, ValueError):
            for stage, n in json.loads(fused.read_text()).items():  # T-stages run in the sink's tasks
                key = self.metric(self.config.stage(stage))
                self._observed[key] = self._observed.get(key, 0) + int(n)
            fused.unlink()
        self._update()

    def _update(self) -> None:
        level_out = 0
        for s in self.config.stages:
            st = self.stats[s.name]
            if s.type == "E":
                st.messages_out = self._observed.get(self.metric(s), 0)
        level_out = sum(self.stats[s.name].messages_out for s in self.config.stages if s.type == "E")
        for s in self.config.stages:
            st = self.stats[s.name]
            if s.type == "T":
                st.messages_in = level_out
                st.messages_out = level_out = self._observed.get(self.metric(s), 0)
            elif s.type == "L":
                st.messages_in = level_out
        dead = self._deadletters() - self._dead_at_start
        if dead:
            self.stats[self.config.stages[-1].name].deadletters = dead  # shown in the summary's total

    def _deadletters(self) -> int:
        from etlstage.state.store import StateStore

        if not (Path(self.config.state_dir) / StateStore.FILE).exists():
            return 0
        store = StateStore(self.config.state_dir)
        try:
            return len(store.deadletters())
        finally:
            store.close()

    def finish(self, query: StreamingQuery | None) -> None:
        """Progress events arrive asynchronously: take the query's last ones before the summary."""
        time.sleep(0.2)
        if query is not None and self.batches == 0:
            for p in query.recentProgress:
                self.progress(p)
        self._update()

    # --- to the user ---------------------------------------------------------------------------

    def reporter(self, enabled: bool, interval: float = 10.0) -> Callable[[], None]:
        from etlstage.runtime.progress import table

        tty = sys.stderr.isatty()
        state = {"next": time.monotonic() + (1.0 if tty else interval), "drawn": 0}

        def tick() -> None:
            if not enabled or time.monotonic() < state["next"]:
                return
            state["next"] = time.monotonic() + (1.0 if tty else interval)
            rows = table(self.view(), live=False)
            if tty:
                if state["drawn"]:
                    sys.stderr.write(f"\x1b[{state['drawn']}F\x1b[J")
                sys.stderr.write("\n".join(rows) + "\n")
                sys.stderr.flush()
                state["drawn"] = len(rows)
            else:
                for r in rows[1:]:
                    log.info("progress %s", " ".join(r.split()))

        return tick

    def view(self) -> Pipeline:
        """This object where the supervisor's progress table expects a pipeline (same fields)."""
        return cast("Pipeline", self)

    def summary(self) -> str:
        from etlstage.runtime.progress import summary

        ran = time.monotonic() - self.started
        return summary(self.view()) + f"\nmicro-batches committed in this run: {self.batches}; query ran {ran:.2f}s"


__all__ = ["Counts"]
