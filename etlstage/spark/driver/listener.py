"""A Spark streaming-query listener that hands each progress report to a function: what the
engine's counters and a native source that follows the query (the Kafka group's offsets)
both need."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def progress_listener(on_progress: Callable[[Any], None]) -> Any:
    """A ``StreamingQueryListener`` calling ``on_progress(event.progress)`` after each
    micro-batch (Spark reports it once the micro-batch's commit is logged)."""
    from pyspark.sql.streaming import StreamingQueryListener

    class Listener(StreamingQueryListener):
        def onQueryStarted(self, event: Any) -> None:
            pass

        def onQueryProgress(self, event: Any) -> None:
            on_progress(event.progress)

        def onQueryIdle(self, event: Any) -> None:
            pass

        def onQueryTerminated(self, event: Any) -> None:
            pass

    return Listener()
