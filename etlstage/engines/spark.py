"""The Spark engine (:mod:`etlstage.spark`) behind :class:`~etlstage.engines.base.Engine`.

Everything of the engine is imported when it is used: ``etlstage --help``, ``validate``
or a supervisor run never load pyspark (a test keeps it so).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from etlstage.config.model import PipelineConfig
from etlstage.engines.base import Attach, RunOptions, Tap, together
from etlstage.errors import ConfigError

if TYPE_CHECKING:
    from etlstage.observe.export import RunExport


class SparkEngine:
    kind = "spark"
    supports_tap = False

    def prepare(self, config: PipelineConfig) -> None:
        from etlstage.spark.tasks.ownership import choose_lock_base

        choose_lock_base()  # the lock folder of this host's Spark processes, before Spark starts

    def run(self, config: PipelineConfig, options: RunOptions) -> int:
        from etlstage.spark.driver.run import run_query
        from etlstage.spark.driver.takeover import take_over

        take_over(config.engine.checkpoint, options.previous_engine)
        attach = _endpoints(config.http, options.export)
        return run_query(config, once=options.once, progress=options.progress, extra_env=options.env, attach=attach)

    def status(self, config: PipelineConfig, *, as_json: bool) -> Callable[[], str]:
        """The engine's document (its checkpoint, dead letters, last run, run lock), rendered as
        the supervisor's is; as JSON what ``/api/status`` serves, without the run (the driver's own)."""
        from etlstage.observe.document import encode
        from etlstage.observe.status import render
        from etlstage.spark.driver.live import status_document
        from etlstage.state.store import StateStore

        def show() -> str:
            doc = status_document(config)
            if as_json:
                return encode(doc, indent=2)
            return "\n".join(render(doc, str(Path(config.state_dir) / StateStore.FILE)))

        return show

    def tap_refusal(self, config: PipelineConfig) -> str:
        return (
            f"tap: pipeline {config.name!r} runs on the Spark engine, where a stage's messages pass "
            "between Spark's tasks on the executors and never through this host's process: there is "
            "nothing to tap; run it with --engine supervisor to tap it"
        )

    def open_tap(self, config: PipelineConfig, stage: str) -> Tap:
        raise ConfigError([self.tap_refusal(config)])


def _endpoints(address: tuple[str, int] | None, export: RunExport | None) -> Attach | None:
    """The status page, metrics and their export, from the engine's counters (the driver)."""
    if address is None and export is None:
        return None
    from etlstage.observe.live import Snapshot
    from etlstage.observe.server import Snapshots, serve_snapshots
    from etlstage.spark.driver.live import documents

    def attach(counts: Any) -> Callable[[], None]:
        take = documents(counts)
        snapshots = Snapshots(lambda: Snapshot(*take()))
        attaching: list[Attach] = []
        if address is not None:
            attaching.append(lambda _: serve_snapshots(snapshots, address))
        if export is not None:
            attaching.append(lambda _: export.attach(snapshots.take, snapshots.take))
        return together(attaching)(counts)

    return attach
