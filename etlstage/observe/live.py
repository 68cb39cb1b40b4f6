"""The supervisor's live state, as the typed status document (:mod:`etlstage.observe.document`).

The supervisor fills it itself (``Pipeline.progress``, which its heartbeat also writes
for ``etlstage status``): bytes, latency buckets, failures by reason, the last errors,
the workers' reported counters, per-worker resources, queues, per-source window counts
and a few minutes of rates.  Built on the event loop, so nothing the pipeline changes
is read half-way.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, cast

from etlstage.observe.document import LiveDoc, StatusDoc

if TYPE_CHECKING:
    from etlstage.runtime.pipeline import Pipeline


@dataclass(frozen=True)
class Snapshot:
    """A serving engine's live state and the status document around it."""

    live: LiveDoc
    status: StatusDoc


def live_state(pipeline: Pipeline) -> LiveDoc:
    return cast(LiveDoc, pipeline.progress())
