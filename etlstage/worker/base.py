"""What a Python worker author writes: a subclass, or a plain function.

>>> class Upper(Transformer):
...     def process(self, messages):
...         return [m.upper() for m in messages]

In ``single`` mode ``process`` gets a list of one message; in ``batch`` mode the whole
batch.  A :class:`Loader` returns nothing; returning means "durably loaded": the SDK
writes EOP only after ``load`` returns — or, when ``load`` returns a
:class:`~concurrent.futures.Future`, only after that future completes (the batch is
finished in the background while the next one is read and prepared).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

from etlstage.protocol.scenario import Scenario


@dataclass(frozen=True)
class Request:
    """One cycle request to a cyclic E-worker (``None`` is passed in plain mode).

    ``raw`` is the request message: empty when offsets are managed by the worker,
    ``{"start": S, "end": E}`` when the supervisor manages them (``start``/``end``
    parsed here; ISO-8601 strings or integers as the offset policy made them).
    """

    raw: bytes
    cycle: int
    start: object = None
    end: object = None

    @classmethod
    def parse(cls, raw: bytes, cycle: int) -> Request:
        if not raw:
            return cls(raw, cycle)
        try:
            doc = json.loads(raw)
        except ValueError:
            return cls(raw, cycle)
        if isinstance(doc, dict):
            return cls(raw, cycle, doc.get("start"), doc.get("end"))
        return cls(raw, cycle)


class Worker:
    """Common hooks.  ``scenario`` is set before :meth:`setup` is called."""

    scenario: Scenario

    def setup(self) -> None:
        """Once, before the first request (open connections, sessions, files)."""

    def teardown(self) -> None:
        """Once, when stdin closes: the supervisor has no more work.  Then exit 0."""

    def report(self) -> dict[str, object] | None:
        """Counters for the supervisor's end-of-run summary, e.g. ``{"valid": 12,
        "invalid": {"GENERR004": 2}}``: numbers, or one level of named numbers.

        Called after each batch or cycle, before its EOP is written; the SDK stores the result
        as ``report-<instance>-<pid>.json`` in ``ETLSTAGE_STATE_DIR``.  Counters count
        from the start of this process.  None (the default): nothing is written.
        """
        return None


class Extractor(Worker):
    def extract(self, request: Request | None) -> Iterable[bytes]:
        """Yield the messages of one cycle (or, plain mode, of the whole run)."""
        raise NotImplementedError

    def on_window_done(self, request: Request) -> None:
        """Worker-managed offsets: a new request arrived, so the previous cycle's window
        was fully loaded downstream — commit its offsets now (docs/protocol.md: windows).  Never
        commit on stdin EOF: that may mean the supervisor died."""


class Transformer(Worker):
    def process(self, messages: list[bytes]) -> Iterable[bytes]:
        """Return (or yield) the results of a batch; zero, one or many per message."""
        raise NotImplementedError

    def process_fn(self) -> Callable[[list[bytes]], Iterable[bytes]]:
        """What the SDK calls for each batch (a plain function's transformer: the function itself)."""
        return self.process


class Loader(Worker):
    #: Batches that may still be finishing in the background (their futures not done)
    #: when ``load`` is called for the next one; the SDK waits for the oldest beyond that.
    max_pending = 1
    #: The id of the batch ``load`` is given (stage key ``batch_id: true``; None otherwise):
    #: the same whenever the same messages are sent again, never the same for others.
    #: A loader that commits it with the data can skip a batch it has (etlstage.worker.idempotent).
    batch_id: str | None = None

    def load(self, messages: list[bytes]) -> Future[Any] | None:
        """Load a batch durably.

        Return None once it is durable, or a Future that completes when it is: the SDK
        then reads and passes on the next batch meanwhile, and acknowledges batches in
        order as their futures complete.  A future that fails stops the worker (exit 1)
        with the batch unacknowledged, so the supervisor sends it again.
        """
        raise NotImplementedError


class _FunctionExtractor(Extractor):
    def __init__(self, fn: Callable[[Request | None], Iterable[bytes]]) -> None:
        self._fn = fn

    def extract(self, request: Request | None) -> Iterable[bytes]:
        return self._fn(request)


class _FunctionTransformer(Transformer):
    def __init__(self, fn: Callable[[list[bytes]], Iterable[bytes]]) -> None:
        self._fn = fn

    def process(self, messages: list[bytes]) -> Iterable[bytes]:
        return self._fn(messages)

    def process_fn(self) -> Callable[[list[bytes]], Iterable[bytes]]:
        return self._fn


class _FunctionLoader(Loader):
    def __init__(self, fn: Callable[[list[bytes]], object]) -> None:
        self._fn = fn

    def load(self, messages: list[bytes]) -> Future[Any] | None:
        result = self._fn(messages)
        return result if isinstance(result, Future) else None


def as_worker(obj: Worker | Callable[..., object], kind: str) -> Worker:
    """A :class:`Worker` from an instance, a class or a plain function of ``kind`` E/T/L."""
    if isinstance(obj, Worker):
        return obj
    if isinstance(obj, type) and issubclass(obj, Worker):
        return obj()
    if callable(obj):
        wrap = {"E": _FunctionExtractor, "T": _FunctionTransformer, "L": _FunctionLoader}[kind]
        return wrap(obj)  # type: ignore[arg-type]
    raise TypeError(f"expected a Worker subclass, instance or function, got {obj!r}")
