"""Running sibling tasks where the first failure cancels the others, unwrapped."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Sequence
from typing import Any


async def run_all(*coros: Coroutine[Any, Any, Any]) -> None:
    """Run until all finish; on the first exception cancel the rest and raise it as is."""
    tasks = [asyncio.ensure_future(c) for c in coros]
    try:
        pending = set(tasks)
        while pending:
            done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_EXCEPTION)
            for t in done:
                if not t.cancelled() and t.exception() is not None:
                    raise t.exception()  # type: ignore[misc]
    finally:
        await cancel(tasks)


async def run_until(main: Coroutine[Any, Any, Any], helper: Coroutine[Any, Any, Any]) -> None:
    """Run ``main`` with ``helper`` beside it; when ``main`` returns, cancel ``helper``.

    An exception in either cancels the other and is raised (the helper's first, as it
    is usually the cause: a reader that saw the worker die while the writer waited).
    """
    m = asyncio.ensure_future(main)
    h = asyncio.ensure_future(helper)
    try:
        while True:
            await asyncio.wait({m, h}, return_when=asyncio.FIRST_COMPLETED)
            for t in (h, m):
                if t.done() and not t.cancelled() and t.exception() is not None:
                    raise t.exception()  # type: ignore[misc]
            if m.done():
                return
            if h.done():  # the helper ended on its own: let main finish
                await m
                return
    finally:
        await cancel([m, h])


async def cancel(tasks: Sequence[asyncio.Future[Any]]) -> None:
    for t in tasks:
        t.cancel()
    for t in tasks:
        try:
            await t
        except BaseException:
            pass
