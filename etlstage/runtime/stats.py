"""Counters a stage keeps for the progress display, the summary and ``status``."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
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
    deadletters: int = 0
    started: float = field(default_factory=time.monotonic)
    workers: dict[int, Any] = field(default_factory=dict)  # instance -> Transport
    pids: list[int] = field(default_factory=list)  # every worker process of this run
    state_dir: str = ""

    def reports(self) -> dict[str, Any]:
        """The counters the stage's workers reported in this run (SDK ``Worker.report``), summed."""
        total: dict[str, Any] = {}
        for path in Path(self.state_dir).glob("report-*.json") if self.state_dir else ():
            if int(path.stem.rsplit("-", 1)[-1]) not in self.pids:
                continue  # a process of an earlier run
            try:
                counters = json.loads(path.read_text())
            except (OSError, ValueError):
                continue
            for key, value in counters.items():
                if isinstance(value, dict):
                    section = total.setdefault(key, {})
                    for k, v in value.items():
                        section[k] = section.get(k, 0) + v
                elif isinstance(value, (int, float)):
                    total[key] = total.get(key, 0) + value
        return total

    def resources(self) -> tuple[int, float]:
        rss, cpu = 0, 0.0
        for t in self.workers.values():
            r = t.resources()
            if r is not None:
                rss += r[0]
                cpu += r[1]
        return rss, cpu
