"""The worker pool of one Spark Python process: its workers kept across tasks.

:data:`REGISTRY` keeps the processes of one Python process across tasks, keyed by
(run, stage, partition): a worker lives across micro-batches, not one per batch.  When
Spark stops the Python process (SIGHUP from its daemon, SIGTERM), every registered
worker gets its stdin closed and a short grace to exit, like a graceful stop.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
import time
from collections.abc import Callable

from etlstage.spark.tasks.ownership import retired_marker

log = logging.getLogger("etlstage.spark.worker")


class Registry:
    """The worker processes of this Python process, by (run, stage, partition), across tasks.

    A watcher thread hands a worker over to another Python process that asks for its
    (stage, partition) (see :mod:`etlstage.spark.tasks.ownership`), once no task here uses it,
    and stops the idle workers of a run whose query has ended (Spark Connect: the
    server's Python processes outlive the client's query).
    """

    def __init__(self) -> None:
        self.entries: dict[tuple[str, str, int], object] = {}
        self._lock = threading.Lock()
        self._watcher: tuple[int, threading.Thread] | None = None

    def get(self, key: tuple[str, str, int]) -> object | None:
        self._install_handlers()
        with self._lock:
            return self.entries.get(key)

    def put(self, key: tuple[str, str, int], value: object) -> None:
        self._install_handlers()
        with self._lock:
            self.entries[key] = value
        self._start_watcher()

    def keep_only(self, run_id: str) -> None:
        """A task of a new run: the workers of earlier runs in this process are stopped."""
        with self._lock:
            old = [(k, self.entries.pop(k)) for k in list(self.entries) if k[0] != run_id]
        for _, value in old:
            self._stop(value, 10.0)

    def stop_all(self, grace: float = 10.0) -> None:
        with self._lock:
            entries, self.entries = self.entries, {}
        for value in entries.values():
            self._stop(value, grace)

    @staticmethod
    def _hand_over(value: object) -> bool:
        hand_over: Callable[[], bool] | None = getattr(value, "hand_over", None)
        try:
            return hand_over is not None and hand_over()
        except Exception:  # the fallback (a stop) is always safe
            log.exception("hand-over failed")
            return False

    @staticmethod
    def _stop(value: object, grace: float) -> None:
        stop: Callable[[float], object] | None = getattr(value, "stop", None)
        if stop is not None:
            with contextlib.suppress(Exception):
                stop(grace)

    # --- handing workers over ------------------------------------------------------------------

    def _start_watcher(self) -> None:
        if self._watcher is not None and self._watcher[0] == os.getpid() and self._watcher[1].is_alive():
            return
        thread = threading.Thread(target=self._watch, name="etlstage handover", daemon=True)
        self._watcher = (os.getpid(), thread)
        thread.start()

    def _watch(self) -> None:
        while True:
            time.sleep(0.05)
            with self._lock:
                items = list(self.entries.items())
            retired = {run for run in {key[0] for key, _ in items} if retired_marker(run).exists()}
            for key, value in items:
                ownership = getattr(value, "ownership", None)
                in_use: threading.Lock | None = getattr(value, "in_use", None)
                if in_use is None:
                    continue
                if key[0] not in retired and (ownership is None or not ownership.asked):
                    continue
                if not in_use.acquire(blocking=False):
                    continue  # a task here is using it: hand over at its end
                try:
                    with self._lock:
                        if self.entries.get(key) is not value:
                            continue
                        del self.entries[key]
                    if key[0] in retired:
                        log.info("%s: the query has ended: stopping its worker", key[1])
                    elif self._hand_over(value):
                        log.info("%s: worker handed over to another Spark Python process", key[1])
                        continue
                    else:
                        log.info("%s: another Spark Python process takes over: stopping the worker", key[1])
                    self._stop(value, 10.0)
                finally:
                    in_use.release()

    # --- signals --------------------------------------------------------------------------------

    def _install_handlers(self) -> None:
        # pyspark resets SIGHUP/SIGTERM at each task in a reused worker: set them again.
        if threading.current_thread() is not threading.main_thread():
            return
        for sig in (signal.SIGHUP, signal.SIGTERM):
            signal.signal(sig, self._on_signal)

    def _on_signal(self, signum: int, frame: object) -> None:
        self.stop_all(grace=5.0)
        os._exit(0)


REGISTRY = Registry()

__all__ = ["REGISTRY", "Registry"]
