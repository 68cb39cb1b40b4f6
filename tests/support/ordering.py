"""The suite's order for ``-n N --dist worksteal``: longest files first, on every process.

pytest-xdist's worksteal scheduler gives each process one contiguous share of the collected
tests and lets an idle process steal the back half of another's queue. With the files
sorted by their recorded time, longest first, and dealt into as many shares as there are
processes, each process starts on its longest files and what is stolen at the end is
short: every process stays busy to the end (longest-processing-time-first scheduling). Files stay whole, so
a module-scoped fixture (a Kafka broker, say) still starts once per module, and tests keep
their order inside their file.

The times are each file's total from a recorded run (``durations.json`` beside this file);
a file not in it counts as a short one. Record them again from a run's JUnit report:

    python -m pytest -q -n 2 --dist worksteal --junitxml=/tmp/suite.xml
    python tests/support/ordering.py /tmp/suite.xml
"""

from __future__ import annotations

import json
import sys
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol, TypeVar

import pytest

DURATIONS = Path(__file__).with_name("durations.json")
UNKNOWN_S = 1.0  # a file without a record: short, so it never holds up the end


class HasNodeId(Protocol):
    nodeid: str


T = TypeVar("T", bound=HasNodeId)


def file_of(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def recorded() -> dict[str, float]:
    try:
        data = json.loads(DURATIONS.read_text())
    except (OSError, ValueError):
        return {}
    return {str(k): float(v) for k, v in data.items()}


def shares(total: int, processes: int) -> list[int]:
    """How many of ``total`` tests worksteal hands each of ``processes`` at the start: the
    first ``total // processes``, each next one an even share of what is left.

    >>> shares(254, 3), shares(7, 2)
    ([84, 85, 85], [3, 4])
    """
    out: list[int] = []
    left = total
    for k in range(processes, 0, -1):
        out.append(left // k)
        left -= out[-1]
    return out


def longest_first_dealt(items: Sequence[T], seconds: dict[str, float], processes: int = 2) -> list[T]:
    """``items`` grouped by file, in the order described above.

    worksteal hands each process one contiguous share of the tests (:func:`shares`), so the
    files are dealt, longest first, into ``processes`` queues of those sizes (each to the
    queue with less time that still has room for it whole; a file with room in none is
    split), and each queue runs its longest files first."""
    by_file: dict[str, list[T]] = {}
    for item in items:
        by_file.setdefault(file_of(item.nodeid), []).append(item)
    files = sorted(by_file, key=lambda f: (-seconds.get(f, UNKNOWN_S), f))
    processes = max(1, processes)
    room = shares(len(items), processes)
    queues: list[list[T]] = [[] for _ in range(processes)]
    load = [0.0] * processes
    every = range(processes)
    for f in files:
        tests = by_file[f]
        fits = [q for q in every if room[q] >= len(tests)]
        for q in sorted(fits or every, key=lambda q: load[q]):
            share = tests[: room[q]]
            tests = tests[len(share) :]
            queues[q].extend(share)
            room[q] -= len(share)
            load[q] += seconds.get(f, UNKNOWN_S) * len(share) / len(by_file[f])
            if not tests:
                break
    return [item for queue in queues for item in queue]


@pytest.hookimpl(trylast=True)  # after -m and -k have deselected: it orders what runs
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # each xdist process collects and orders alike; it knows how many there are
    processes = int(getattr(config, "workerinput", {}).get("workercount", 2))
    items[:] = longest_first_dealt(items, recorded(), processes)


def record(junit_xml: Path) -> dict[str, float]:
    """Each file's total test time from a pytest JUnit report (``classname`` is dotted)."""
    totals: dict[str, float] = {}
    for case in ET.parse(junit_xml).getroot().iter("testcase"):
        module = case.get("classname", "").split(".")
        # "tests.core.x.test_y" or "tests.core.x.test_y.TestClass"
        while module and not module[-1].startswith("test_"):
            module.pop()
        if not module:
            continue
        name = "/".join(module) + ".py"
        totals[name] = totals.get(name, 0.0) + float(case.get("time", "0") or 0)
    return {k: round(v, 1) for k, v in sorted(totals.items())}


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    got = record(Path(sys.argv[1]))
    DURATIONS.write_text(json.dumps(got, indent=0, sort_keys=True) + "\n")
    print(f"{len(got)} files, {sum(got.values()):.0f} s in all, into {DURATIONS}")
