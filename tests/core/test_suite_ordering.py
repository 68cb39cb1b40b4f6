"""The suite's own order for `-n 2 --dist worksteal` (tests/support/ordering.py)."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

from tests.support.ordering import file_of, longest_first_dealt, record, shares


@dataclass
class Item:
    nodeid: str


def items(counts: dict[str, int]) -> list[Item]:
    return [Item(f"{f}::t{i}") for f, n in counts.items() for i in range(n)]


def test_each_process_starts_on_a_long_file_and_gets_its_count() -> None:
    counts = {"a.py": 3, "b.py": 40, "c.py": 2, "d.py": 30, "e.py": 1, "f.py": 4}
    seconds = {"a.py": 200.0, "c.py": 180.0, "f.py": 90.0, "b.py": 20.0, "d.py": 15.0}
    got = longest_first_dealt(items(counts), seconds)
    assert sorted(i.nodeid for i in got) == sorted(i.nodeid for i in items(counts))
    half = len(got) // 2  # what worksteal hands the first process
    first, second = got[:half], got[half:]
    assert {file_of(first[0].nodeid), file_of(second[0].nodeid)} == {"a.py", "c.py"}
    # the time is shared, not the count alone: neither process holds both long files
    assert not {"a.py", "c.py"} <= {file_of(i.nodeid) for i in first}
    assert not {"a.py", "c.py"} <= {file_of(i.nodeid) for i in second}


def test_three_processes_each_start_on_one_of_the_three_longest_files() -> None:
    counts = {"a.py": 3, "b.py": 40, "c.py": 2, "d.py": 30, "e.py": 1, "f.py": 4, "g.py": 5}
    seconds = {"a.py": 200.0, "c.py": 180.0, "f.py": 170.0, "b.py": 20.0, "d.py": 15.0, "g.py": 10.0}
    got = longest_first_dealt(items(counts), seconds, processes=3)
    assert sorted(i.nodeid for i in got) == sorted(i.nodeid for i in items(counts))
    cuts = shares(len(got), 3)  # what worksteal hands each process
    starts = [0, cuts[0], cuts[0] + cuts[1]]
    assert {file_of(got[k].nodeid) for k in starts} == {"a.py", "c.py", "f.py"}


def test_files_stay_whole_and_keep_their_order_when_they_fit() -> None:
    counts = {"x.py": 4, "y.py": 4, "z.py": 2, "w.py": 2}
    got = longest_first_dealt(items(counts), {"x.py": 50.0, "y.py": 40.0})
    runs = [file_of(i.nodeid) for i in got]
    for f in counts:  # one contiguous run per file, in its own order
        where = [k for k, name in enumerate(runs) if name == f]
        assert where == list(range(where[0], where[0] + counts[f])), runs
        assert [i.nodeid for i in got if file_of(i.nodeid) == f] == [f"{f}::t{k}" for k in range(counts[f])]


def test_a_file_without_a_record_counts_as_short() -> None:
    got = longest_first_dealt(items({"new.py": 1, "old.py": 1}), {"old.py": 30.0})
    assert [file_of(i.nodeid) for i in got] == ["old.py", "new.py"]


def test_a_junit_report_gives_each_files_total(tmp_path: Path) -> None:
    suite = ET.Element("testsuite")
    for cls, t in [("tests.core.x.test_a", "1.5"), ("tests.core.x.test_a.TestK", "2"), ("tests.test_b", "0.25")]:
        ET.SubElement(suite, "testcase", classname=cls, name="t", time=t)
    report = tmp_path / "r.xml"
    ET.ElementTree(suite).write(report)
    assert record(report) == {"tests/core/x/test_a.py": 3.5, "tests/test_b.py": 0.2}
