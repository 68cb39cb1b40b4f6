"""The live state of a running pipeline, as one JSON-ready document.

It extends what the heartbeat writes for ``etlstage status`` (``Pipeline.progress``) with
what only the running process knows: bytes, latency buckets, failures by reason, the
last errors, the workers' reported counters, per-worker resources, queues, per-source
window counts and a few minutes of rates.  Built on the event loop, so nothing the
pipeline changes is read half-way; it costs one pass over the stages, not per message.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from etlstage.runtime.pipeline import Pipeline


@dataclass(frozen=True)
class Snapshot:
    """The serving supervisor's live state and the status document around it."""

    live: dict[str, Any]
    status: dict[str, Any]


def live_state(pipeline: Pipeline) -> dict[str, Any]:
    doc: dict[str, Any] = dict(pipeline.progress())
    doc["pipeline"] = pipeline.config.name
    doc["time"] = time.time()
    stages: dict[str, Any] = doc["stages"]
    for name, s in pipeline.stats.items():
        inboxes = list({id(b): b for b in pipeline.inputs.get(name, [])}.values())
        resources = s.worker_resources()
        workers = []
        for instance, transport in sorted(s.workers.items()):
            rss, cpu = resources.get(instance, (0, 0.0))
            workers.append(
                {
                    "instance": instance,
                    "pid": transport.pid,
                    "rss": rss,
                    "cpu": round(cpu, 1),
                    "cpu_seconds": transport.cpu_seconds(),
                }
            )
        stages[name].update(
            {
                "type": s.type,
                "bytes_in": s.bytes_in,
                "bytes_out": s.bytes_out,
                "failures": dict(s.failures),
                "last_errors": [{"at": at, "error": text} for at, text in s.last_errors],
                "latency": {"buckets": s.latency.cumulative(), "sum": round(s.latency.sum, 6)},
                "queued": {"messages": sum(b.messages for b in inboxes), "bytes": sum(b.bytes for b in inboxes)},
                "workers": workers,
                "reports": s.reports(),
                "history": pipeline.history.series(name),
            }
        )
    doc["sources"] = [
        {
            "source": label,
            "stage": src.stage.name,
            "instance": int(label.rsplit("#", 1)[1]) if "#" in label else 0,
            "windows_opened": src.next_seq,  # counted across runs: a window's seq is its number
            "windows_committed": src.next_seq - len(src.windows),
            "windows_in_flight": len(src.windows),
        }
        for label, src in pipeline.sources.items()
    ]
    return doc
