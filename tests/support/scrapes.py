"""Reading /metrics of a live run (tests/support/live_run.py) with prometheus_client's parser."""

from __future__ import annotations

import itertools
import time

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.support.live_run import LiveRun
from tests.support.waiting import wait_for

MONOTONIC = ("_total", "_bucket", "_count", "_sum")
Key = tuple[str, frozenset[tuple[str, str]]]
Samples = dict[Key, float]


def scrape(run: LiveRun) -> tuple[Samples, dict[str, str]]:
    """Every sample of /metrics by (name, labels), and each family's type."""
    code, ctype, body = run.get("/metrics")
    assert code == 200 and ctype.startswith("text/plain"), (code, ctype)
    samples: Samples = {}
    types: dict[str, str] = {}
    for fam in text_string_to_metric_families(body):
        for s in fam.samples:
            samples[(s.name, frozenset(s.labels.items()))] = s.value
            types[s.name] = fam.type
    return samples, types


def value(samples: Samples, name: str, **labels: str) -> float:
    want = set(labels.items())
    found = [v for (n, ls), v in samples.items() if n == name and want <= ls]
    assert len(found) == 1, (name, labels, found)
    return found[0]


def scrape_until_loaded(
    run: LiveRun, stage: str, n: int, within: float, every: float = 0.2, source: str = "src"
) -> list[Samples]:
    """Scrapes until ``stage`` took in ``n`` messages, then, once ``source`` committed them all
    (nothing moves after that), a last one."""
    scrapes = []
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        samples, _ = scrape(run)
        scrapes.append(samples)
        if value(samples, "etlstage_stage_input_messages_total", stage=stage) == n:
            break
        time.sleep(every)
    else:
        pytest.fail("the run did not load its messages in time:\n" + run.stderr)

    def all_committed() -> Samples | None:
        samples = scrape(run)[0]
        return samples if value(samples, "etlstage_source_committed_messages_total", stage=source) == n else None

    scrapes.append(wait_for(all_committed, within, f"{source} to commit its {n} messages", every))
    return scrapes


def check_growth(scrapes: list[Samples], types: dict[str, str], stage: str, n: int) -> None:
    """A scrape caught the run mid-way, and no counter or histogram series ever went down."""
    mid = [s for s in scrapes if 0 < value(s, "etlstage_stage_input_messages_total", stage=stage) < n]
    assert mid, "no scrape caught the run in progress"
    for before, after in itertools.pairwise(scrapes):
        for key, v in before.items():
            if key[0].endswith(MONOTONIC) and types.get(key[0]) in ("counter", "histogram"):
                assert after[key] >= v, (key, v, after[key])


def check_summary(final: Samples, summary: dict[str, tuple[int, int]]) -> None:
    """Each stage's messages in and out on /metrics are the end-of-run summary's."""
    for stage, (n_in, n_out) in summary.items():
        assert value(final, "etlstage_stage_input_messages_total", stage=stage) == n_in, stage
        assert value(final, "etlstage_stage_output_messages_total", stage=stage) == n_out, stage


def check_bytes_and_requests(final: Samples, stages: set[str], source: str, sink: str, n: int) -> None:
    """Bytes of ``n`` messages 0..n-1 from ``source`` to ``sink`` (each with its EOM); every
    request answered is in its stage's latency histogram; ``sink`` answered one per 100."""
    expected_bytes = sum(len(str(i)) + 1 for i in range(n))
    assert value(final, "etlstage_stage_output_bytes_total", stage=source) == expected_bytes
    assert value(final, "etlstage_stage_input_bytes_total", stage=sink) == expected_bytes
    for stage in stages:
        assert value(final, "etlstage_stage_request_duration_seconds_count", stage=stage) == value(
            final, "etlstage_stage_requests_total", stage=stage
        )
    assert value(final, "etlstage_stage_requests_total", stage=sink) >= n / 100
