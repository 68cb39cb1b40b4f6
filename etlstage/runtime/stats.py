"""Counters a stage keeps for the progress display, the summary and ``status``."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any


@dataclass
class StageStats:
    name: str
    type: str
    messages_in: int = 0
    messages_out: int = 0
    jobs: int = 0
    in_flight: int = 0
    restarts: int = 0
    recycled: int = 0  # replaced between batches for max_rss
    deadletters: int = 0
    started: float = field(default_factory=time.monotonic)
    workers: dict[int, Any] = field(default_factory=dict)  # instance -> Transport

    def resources(self) -> tuple[int, float]:
        rss, cpu = 0, 0.0
        for t in self.workers.values():
            r = t.resources()
            if r is not None:
                rss += r[0]
                cpu += r[1]
        return rss, cpu
