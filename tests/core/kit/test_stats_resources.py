"""A stage's worker resources (kit.stats, ``StageStats.worker_resources``) are measured at
most once a second, whoever asks: psutil's CPU percent covers the time since its previous
reading, so a progress line, a heartbeat and a scrape a moment apart must share one reading
rather than each take a near-empty interval's noise."""

from __future__ import annotations

import pytest

from etlstage.kit import stats as stats_module
from etlstage.kit.stats import StageStats


class Reading:
    """A worker's transport as the stats see it: each measurement is counted and differs."""

    def __init__(self) -> None:
        self.readings = 0

    def resources(self) -> tuple[int, float]:
        self.readings += 1
        return 1000 * self.readings, float(self.readings)


def test_readings_within_a_second_share_one_measurement(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = [100.0]
    monkeypatch.setattr(stats_module.time, "monotonic", lambda: clock[0])
    worker = Reading()
    stats = StageStats(name="t", type="T", workers={0: worker})

    assert stats.worker_resources() == {0: (1000, 1.0)}
    clock[0] += 0.5
    assert stats.resources() == (1000, 1.0)  # half a second later: the same reading
    clock[0] += 0.49
    assert stats.worker_resources() == {0: (1000, 1.0)}
    assert worker.readings == 1
    clock[0] += 0.01  # a second after the first: measured again
    assert stats.worker_resources() == {0: (2000, 2.0)}
    clock[0] += 0.99
    assert stats.worker_resources() == {0: (2000, 2.0)} and worker.readings == 2
