"""The run's metrics kept beyond its end: a node-exporter textfile and a Pushgateway push.

A ``--once`` run may end before Prometheus scrapes ``/metrics``.  The same collector
(:class:`etlstage.observe.metrics.PipelineCollector`, one source for every rendering)
is written to a file every few seconds and at the end (``--metrics-file``, atomically,
for node-exporter's textfile collector), and pushed once at the end (``--pushgateway``).
The end adds how the run ended (``etlstage_run_exit_code``, ``etlstage_run_end_time_seconds``),
which no scrape of a running pipeline can show.  The process's own metrics are left out:
they describe a process that is gone.
"""

from __future__ import annotations

import functools
import logging
import os
import socket
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, push_to_gateway, write_to_textfile
from prometheus_client.exposition import basic_auth_handler, default_handler
from prometheus_client.metrics_core import GaugeMetricFamily, Metric

from etlstage.errors import ConfigError
from etlstage.observe.live import Snapshot
from etlstage.observe.metrics import PipelineCollector, registry
from etlstage.redact import redact_text, redact_url

if TYPE_CHECKING:
    from etlstage.runtime.pipeline import Pipeline

log = logging.getLogger("etlstage.metrics")

WRITE_SECONDS = 5.0  # between textfile writes during a run
PUSH_TIMEOUT = 10.0
# Basic auth for the Pushgateway, read from the environment: a process's environment is
# private to its user, its command line is not
GATEWAY_USER_ENV, GATEWAY_PASSWORD_ENV = "ETLSTAGE_PUSHGATEWAY_USERNAME", "ETLSTAGE_PUSHGATEWAY_PASSWORD"


@dataclass(frozen=True)
class Targets:
    """Where a run's metrics go: ``--metrics-file`` and ``--pushgateway``."""

    metrics_file: str | None = None
    pushgateway: str | None = None

    def __bool__(self) -> bool:
        return bool(self.metrics_file or self.pushgateway)


def grouping_key() -> dict[str, str]:
    """The Pushgateway group of a run besides its job (the pipeline): the machine it ran on.
    Not ``instance``: the pushed series carry their own ``instance`` label (the worker's),
    and a grouping label must not appear in them."""
    return {"host": socket.gethostname()}


def check_file(path: str) -> str:
    """``--metrics-file``: its folder must exist (the temporary file is written beside it)."""
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise ConfigError([f"--metrics-file {path}: no folder {folder}"])
    return path


def _same(snap: Snapshot) -> Snapshot:
    return snap


def check_gateway(url: str) -> str:
    """``--pushgateway``: an http(s) URL with a host (``host:port`` alone means http).
    User information in it (``http://user:pw@host``) is taken for basic auth, with a
    warning: the environment (:data:`GATEWAY_USER_ENV`) keeps it out of the process list."""
    full = url if "://" in url else f"http://{url}"
    parts = urllib.parse.urlsplit(full)
    try:
        parts.port  # noqa: B018 -- raises on a port that is not a number
    except ValueError:
        parts = parts._replace(netloc="")
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(
            [f"--pushgateway {redact_url(url)!r}: not an http(s) URL of a Pushgateway (e.g. http://pushgateway:9091)"]
        )
    if parts.username is not None:
        log.warning(
            "--pushgateway %s: credentials in the URL are visible to every local user in the process list; "
            "set %s and %s instead",
            redact_url(full),
            GATEWAY_USER_ENV,
            GATEWAY_PASSWORD_ENV,
        )
    return full


def gateway_handler(url: str, environ: Mapping[str, str]) -> tuple[str, Callable[..., Callable[[], None]]]:
    """``(url without its user information, prometheus_client push handler)``: basic auth
    when the environment (first) or the URL gives a user name."""
    parts = urllib.parse.urlsplit(url)
    bare = parts._replace(netloc=parts.netloc.rpartition("@")[2]).geturl()
    user = environ.get(GATEWAY_USER_ENV) or urllib.parse.unquote(parts.username or "")
    password = environ.get(GATEWAY_PASSWORD_ENV) or urllib.parse.unquote(parts.password or "")
    if not user:
        return bare, default_handler
    return bare, functools.partial(basic_auth_handler, username=user, password=password)


class _Ended:
    """The run's exit status and end time, as gauges."""

    def __init__(self, pipeline: str, code: int, when: float) -> None:
        self.pipeline, self.code, self.when = pipeline, code, when

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        code = GaugeMetricFamily(
            "etlstage_run_exit_code",
            "Exit status of the run (0: done or stopped gracefully, 1: failed, 2: a configuration or state error).",
            labels=["pipeline"],
        )
        code.add_metric([self.pipeline], float(self.code))
        yield code
        end = GaugeMetricFamily("etlstage_run_end_time_seconds", "When the run ended (Unix time).", labels=["pipeline"])
        end.add_metric([self.pipeline], self.when)
        yield end


class RunExport:
    """One run's export.  :meth:`attach` starts the periodic textfile writes over ``during``
    (how a thread reads a snapshot: through the supervisor's event loop) and returns the
    function that takes the last snapshot (``final``: in place, on the thread ending the run);
    :meth:`end` writes the file a last time with the exit status, and pushes."""

    def __init__(self, targets: Targets, job: str, interval: float = WRITE_SECONDS) -> None:
        self.targets, self.job, self.interval = targets, job, interval
        self._during: Callable[[], Snapshot] | None = None
        self._last: Snapshot | None = None
        self._lock = threading.Lock()
        self._ended = False  # once the final file is written, a late periodic write must not replace it
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="etlstage-metrics", daemon=True)

    def attach(self, during: Callable[[], Snapshot], final: Callable[[], Snapshot]) -> Callable[[], None]:
        self._during = during
        if self.targets.metrics_file:
            self._thread.start()

        def stop() -> None:
            self._stop.set()
            try:
                self._last = final()
            except Exception as exc:  # the figures are lost, not the run's outcome
                log.warning("metrics: the last figures could not be read: %s", exc)

        return stop

    def attach_supervisor(self, pipeline: Pipeline) -> Callable[[], None]:
        """For :func:`etlstage.runtime.runner.run_pipeline` (called on its event loop)."""
        import asyncio

        from etlstage.observe.server import Snapshots, on_loop, pipeline_snapshot

        take = functools.partial(pipeline_snapshot, pipeline)
        return self.attach(Snapshots(take, on_loop(asyncio.get_running_loop())).get, take)

    def _loop(self) -> None:
        assert self._during is not None
        while not self._stop.wait(self.interval):
            try:
                snap = self._during()  # outside the lock: it may wait for a busy event loop
                self._write(registry(functools.partial(_same, snap)))
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

    def end(self, code: int) -> None:
        """The last write and the push, with the exit status; a failure of either is a
        warning, not a failed run.  Without a snapshot (the run failed before it started)
        only the exit status is exported."""
        self._stop.set()
        reg = CollectorRegistry(auto_describe=False)
        if (last := self._last) is not None:
            reg.register(PipelineCollector(functools.partial(_same, last)))
        reg.register(_Ended(self.job, code, time.time()))
        if self.targets.metrics_file:
            try:
                self._write(reg, final=True)
                log.info("metrics written to %s", self.targets.metrics_file)
            except Exception as exc:
                log.warning("metrics file %s: not written: %s", self.targets.metrics_file, exc)
        if self.targets.pushgateway:
            url, handler = gateway_handler(self.targets.pushgateway, os.environ)
            try:
                push_to_gateway(
                    url, job=self.job, registry=reg, grouping_key=grouping_key(), timeout=PUSH_TIMEOUT, handler=handler
                )
                log.info("metrics pushed to %s (job %s)", url, self.job)
            except Exception as exc:
                log.warning("pushgateway %s: metrics not pushed: %s", url, redact_text(str(exc)))
