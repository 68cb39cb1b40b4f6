"""The run's metrics kept beyond its end: a node-exporter textfile and a Pushgateway push.

A ``--once`` run may end before Prometheus scrapes ``/metrics``.  The same collector
(:class:`etlstage.observe.metrics.PipelineCollector`, one source for every rendering)
is written to a file every few seconds and at the end (``--metrics-file``, atomically,
for node-exporter's textfile collector), and pushed once at the end (``--pushgateway``).
The process's own metrics are left out: they describe a process that is gone.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, push_to_gateway, write_to_textfile

from etlstage.errors import ConfigError
from etlstage.observe.live import Snapshot
from etlstage.observe.metrics import PipelineCollector

if TYPE_CHECKING:
    from etlstage.runtime.pipeline import Pipeline

log = logging.getLogger("etlstage.metrics")

WRITE_SECONDS = 5.0  # between textfile writes during a run
PUSH_TIMEOUT = 10.0


@dataclass(frozen=True)
class Targets:
    """Where a run's metrics go at its end: ``--metrics-file`` and ``--pushgateway``."""

    metrics_file: str | None = None
    pushgateway: str | None = None

    def __bool__(self) -> bool:
        return bool(self.metrics_file or self.pushgateway)


def registry(snapshot: Callable[[], Snapshot]) -> CollectorRegistry:
    """A registry with the pipeline's collector over ``snapshot`` (what ``/metrics`` serves too)."""
    reg = CollectorRegistry(auto_describe=False)
    reg.register(PipelineCollector(snapshot))
    return reg


def grouping_key() -> dict[str, str]:
    """The Pushgateway group of a run besides its job (the pipeline): the machine it ran on.
    Not ``instance``: the pushed series carry their own ``instance`` label (the worker's),
    and a grouping label must not appear in them."""
    return {"host": socket.gethostname()}


class Exporter:
    """Writes the textfile every ``interval`` seconds from a thread, then, at :meth:`stop`,
    writes it one last time and pushes.  ``during`` is how the thread reads a snapshot
    (through the supervisor's event loop); ``final`` how :meth:`stop` does (in place, on
    the thread that calls it)."""

    def __init__(
        self,
        targets: Targets,
        job: str,
        during: Callable[[], Snapshot],
        final: Callable[[], Snapshot],
        interval: float = WRITE_SECONDS,
    ) -> None:
        self.targets, self.job, self.interval = targets, job, interval
        self._during, self._final = registry(during), registry(final)
        self._lock = threading.Lock()
        self._ended = False  # once the final file is written, a late periodic write must not replace it
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="etlstage-metrics", daemon=True)

    def start(self) -> None:
        if self.targets.metrics_file:
            self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self._write(self._during)
            except Exception as exc:  # the loop busy or gone, the disk full: the next write may do
                log.debug("metrics file: not written this time: %s", exc)

    def _write(self, reg: CollectorRegistry, final: bool = False) -> None:
        path = self.targets.metrics_file
        assert path is not None
        with self._lock:
            if self._ended:
                return
            write_to_textfile(path, reg)  # a temporary file renamed over the old one: atomic
            self._ended = final

    def stop(self) -> None:
        """The last write and the push; a failure of either is a warning, not a failed run."""
        self._stop.set()
        if self.targets.metrics_file:
            try:
                self._write(self._final, final=True)
                log.info("metrics written to %s", self.targets.metrics_file)
            except Exception as exc:
                log.warning("metrics file %s: not written: %s", self.targets.metrics_file, exc)
        if self.targets.pushgateway:
            try:
                push_to_gateway(
                    self.targets.pushgateway,
                    job=self.job,
                    registry=self._final,
                    grouping_key=grouping_key(),
                    timeout=PUSH_TIMEOUT,
                )
                log.info("metrics pushed to %s (job %s)", self.targets.pushgateway, self.job)
            except Exception as exc:
                log.warning("pushgateway %s: metrics not pushed: %s", self.targets.pushgateway, exc)


def check_file(path: str) -> str:
    """``--metrics-file``: its folder must exist (the temporary file is written beside it)."""
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise ConfigError([f"--metrics-file {path}: no folder {folder}"])
    return path


def attach_supervisor(targets: Targets, job: str) -> Callable[[Pipeline], Callable[[], None]]:
    """For :func:`etlstage.runtime.runner.run_pipeline`: export ``pipeline``'s metrics; its
    last snapshot is taken in place, on the event loop that stops the run."""
    import asyncio
    import functools

    from etlstage.observe.server import Snapshots, on_loop, pipeline_snapshot

    def attach(pipeline: Pipeline) -> Callable[[], None]:
        take = functools.partial(pipeline_snapshot, pipeline)
        during = Snapshots(take, on_loop(asyncio.get_running_loop())).get
        exporter = Exporter(targets, job, during, take)
        exporter.start()
        return exporter.stop

    return attach


def export_snapshots(targets: Targets, job: str, snapshot: Callable[[], Snapshot]) -> Callable[[], None]:
    """Export over any source of snapshots read in place (the Spark engine's driver uses
    this); returns the function that writes and pushes the last figures."""
    exporter = Exporter(targets, job, snapshot, snapshot)
    exporter.start()
    return exporter.stop
