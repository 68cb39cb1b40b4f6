"""Structured concurrency for the supervisor: no task outlives the block that started it.

:class:`Scope` is an :class:`asyncio.TaskGroup` whose first failure is raised as it is —
the :class:`~etlstage.errors.WorkerError` or :class:`~etlstage.errors.PipelineError` the
callers catch and report — not wrapped in an :class:`ExceptionGroup`: the first failure
cancels the other tasks, and the block waits for every task to end before it returns.
:func:`run_all` and :func:`run_until` are the two shapes the supervisor uses.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Sequence
from types import TracebackType
from typing import Any


def first_error(group: BaseExceptionGroup[BaseException]) -> BaseException:
    """The first failure in ``group`` (a nested group's first, depth first)."""
    error = group.exceptions[0]
    return first_error(error) if isinstance(error, BaseExceptionGroup) else error


class Scope:
    """A task group whose tasks end with the block, and whose first failure is raised unwrapped.

    >>> async def fails(): raise ValueError("no")
    >>> async def waits(): await asyncio.sleep(60)
    >>> async def main():
    ...     async with Scope() as scope:
    ...         slow = scope.start(waits())
    ...         scope.start(fails())
    ...     return "unreached"
    >>> asyncio.run(main())
    Traceback (most recent call last):
    ...
    ValueError: no
    """

    def __init__(self) -> None:
        self._group = asyncio.TaskGroup()

    async def __aenter__(self) -> Scope:
        await self._group.__aenter__()
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None
    ) -> None:
        try:
            await self._group.__aexit__(kind, error, tb)
            return
        except BaseExceptionGroup as group:
            failed = first_error(group)
        raise failed  # outside the handler: its context stays its own, not the group

    def start(self, coro: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        """Run ``coro`` as a task of this scope (also while the block waits at its end)."""
        return self._group.create_task(coro)


async def run_all(*coros: Coroutine[Any, Any, Any]) -> None:
    """Run until all finish; on the first exception cancel the rest and raise it as is."""
    async with Scope() as scope:
        for coro in coros:
            scope.start(coro)


async def run_until(main: Coroutine[Any, Any, Any], helper: Coroutine[Any, Any, Any]) -> None:
    """Run ``main`` with ``helper`` beside it; when ``main`` returns, cancel ``helper``.

    An exception in either cancels the other and is raised (the helper's is usually the
    cause: a reader that saw the worker die while the writer waited).  A helper that
    ends on its own lets ``main`` finish.
    """
    async with Scope() as scope:
        beside = scope.start(helper)
        await main
        beside.cancel()


async def cancel(tasks: Sequence[asyncio.Future[Any]]) -> None:
    """Cancel ``tasks`` and wait until each has ended (whatever it ended with)."""
    for t in tasks:
        t.cancel()
    for t in tasks:
        try:
            await t
        except BaseException:
            pass
