"""A plain extractor read ahead: its next window is extracted and spooled while a batch runs.

Without it the driver reads a plain worker's output only when Spark asks for the next
micro-batch's offsets, so extraction and the running batch take turns.  Here a thread
of the source's planning process drains the worker into windows, writes each to the
spool (synced) under a provisional name and hands it over; ``latestOffset`` renames the
next one into place under its batch number — still on disk before Spark logs the
batch's offsets.  A window closes at ``max_bytes``, ``linger`` seconds after its first
bytes, or as soon as ``latestOffset`` waits for one and it holds anything: a fast
extractor fills large windows while batches run (their fixed cost is paid less often), a
slow one hands over what it has without delay.  At most one window waits on disk and
one fills in memory; the worker blocks on its pipe meanwhile.
"""

from __future__ import annotations

import os
import queue
import threading
import time
from pathlib import Path

from etlstage.spark.tasks.extract import ExtractWorker
from etlstage.spark.tasks.spool import write_window
from etlstage.state.durable import fsync_path

STEP = 0.05  # seconds a read waits for more after the first bytes (then checks whether a window is wanted)


class ReadAhead:
    def __init__(self, worker: ExtractWorker, spool: Path, parts: int, max_bytes: int, linger: float) -> None:
        self.worker = worker
        self.spool = spool
        self.ahead = spool / "ahead"  # not globbed by the spool's clean-up (only *.bin directly under it)
        self.parts = parts
        self.max_bytes = max_bytes
        self.linger = linger
        self.ended = False
        self._windows: queue.Queue[tuple[str, object]] = queue.Queue(maxsize=1)
        self._stopping = threading.Event()
        self._wanted = threading.Event()  # latestOffset waits for a window
        self._first: float | None = None  # when the window being filled got its first bytes
        self._thread = threading.Thread(target=self._read, name=f"read ahead {worker.label}", daemon=True)
        self._thread.start()

    def _read(self) -> None:
        n = 0
        pending: list[bytes] = []
        size = 0
        try:
            while not self._stopping.is_set():
                # short pieces, so that a window can be handed over as soon as one is wanted
                block, ended = self.worker.drain_plain(self.max_bytes - size, STEP)
                if block:
                    pending.append(block)
                    size += len(block)
                    if self._first is None:
                        self._first = time.monotonic()
                due = size and (
                    ended
                    or size >= self.max_bytes
                    or self._wanted.is_set()
                    or time.monotonic() - (self._first or 0.0) >= self.linger
                )
                if due:
                    write_window(self.ahead, str(n), pending, self.worker.stage.markers.eom, self.parts)
                    pending, size, self._first = [], 0, None
                    self._put(("window", str(n)))
                    n += 1
                if ended:
                    self._put(("end", None))
                    return
        except BaseException as exc:  # the worker failed: latestOffset raises it
            self._put(("error", exc))

    def _put(self, item: tuple[str, object]) -> None:
        while not self._stopping.is_set():
            try:
                self._windows.put(item, timeout=0.2)
                return
            except queue.Full:
                continue

    def take(self, seq: int) -> bool:
        """The next window as batch ``seq``'s spool files; False when the worker has ended."""
        if self.ended:
            return False
        self._wanted.set()  # the thread hands over what it has instead of filling a window
        try:
            kind, value = self._windows.get()
        finally:
            self._wanted.clear()
        if kind == "error":
            assert isinstance(value, BaseException)
            raise value
        if kind == "end":
            self.ended = True
            return False
        for p in range(self.parts):
            os.replace(self.ahead / f"{value}-{p}.bin", self.spool / f"{seq}-{p}.bin")
        fsync_path(self.spool, directory=True)
        return True

    def stop(self) -> None:
        self._stopping.set()
        self._thread.join(timeout=1.0)


__all__ = ["ReadAhead"]
