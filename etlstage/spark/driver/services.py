"""The pipeline's services (an emulator, a data generator) under the Spark engine.

The supervisor engine's :class:`~etlstage.kit.services.Services` runs them on its
event loop; the Spark driver has none, so they get one of their own in a thread: started
in order before the Spark session (their exports reach every stage's environment), kept
running (and their output read) while the query runs, stopped after it.  They run on the
driver: on a cluster, what they export must be reachable from the executors.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

from etlstage.config.model import PipelineConfig
from etlstage.kit.services import Services

T = TypeVar("T")


@contextmanager
def running_services(config: PipelineConfig, env: dict[str, str]) -> Iterator[dict[str, str]]:
    """The enabled services of ``config`` running for the block; yields their exports."""
    services = Services(config.services, config.base_dir)
    if not services.services:
        yield {}
        return
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, name="etlstage-services", daemon=True)
    thread.start()

    def call(coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, loop).result()

    try:
        yield call(services.start(env))
    finally:
        try:
            call(services.stop())
        finally:
            loop.call_soon_threadsafe(loop.stop)
            thread.join(10)
            loop.close()


__all__ = ["running_services"]
