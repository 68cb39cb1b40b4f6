"""A stage's worker reports (kit.stats, ``StageStats.reports``): numbers summed across the
run's worker processes, sections of numbers summed key by key, anything else left out
with one warning per file, and never a crash on a report shaped otherwise."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from etlstage.kit.stats import StageStats


class Raw:
    """A report's text as written, for values json.dumps would not write (1e400)."""

    def __init__(self, text: str) -> None:
        self.text = text


def stage_with_reports(tmp_path: Path, reports: dict[int, object]) -> StageStats:
    for pid, counters in reports.items():
        text = counters.text if isinstance(counters, Raw) else json.dumps(counters)
        (tmp_path / f"report-{pid}.json").write_text(text)
    return StageStats(name="load", type="L", state_dir=str(tmp_path), pids=list(reports))


def test_numbers_and_sections_of_numbers_are_summed_over_the_runs_processes(tmp_path: Path) -> None:
    stats = stage_with_reports(
        tmp_path, {11: {"rows": 3, "by table": {"a": 1}}, 12: {"rows": 4.5, "by table": {"a": 2, "b": 5}}}
    )
    (tmp_path / "report-13.json").write_text(json.dumps({"rows": 1000}))  # an earlier run's process: not counted
    assert stats.reports() == {"rows": 7.5, "by table": {"a": 3, "b": 5}}


@pytest.mark.parametrize(
    "odd",
    [
        "many",  # a string
        [1, 2],  # a list
        True,  # a flag is not a count
        {"a": {"deeper": 1}},  # a section deeper than one level
        float("nan"),  # Python's json reads NaN, Infinity and 1e400 as floats JSON cannot hold
        float("inf"),
        float("-inf"),
    ],
)
def test_a_report_shaped_otherwise_is_left_out_with_a_warning_and_the_rest_kept(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, odd: object
) -> None:
    stats = stage_with_reports(tmp_path, {21: {"rows": 2, "kept": 1}, 22: {"rows": odd, "kept": 2}})
    with caplog.at_level(logging.WARNING, logger="etlstage"):
        total = stats.reports()
        stats.reports()  # a second look warns no more
    assert total == {"rows": 2, "kept": 3}, total
    warnings = [r.getMessage() for r in caplog.records if "holds more than finite numbers" in r.getMessage()]
    assert warnings == [
        f"stage load: {tmp_path / 'report-22.json'} holds more than finite numbers and sections of them: the rest is ignored"
    ]


def test_a_name_that_is_a_section_in_one_report_and_a_number_in_another_keeps_the_first(tmp_path: Path) -> None:
    """Whichever report is read first sets the shape; the other's value is left out, and
    the sum never fails on a number added to a section or the other way round."""
    stats = stage_with_reports(tmp_path, {31: {"rows": {"a": 1}}, 32: {"rows": 2}})
    total = stats.reports()
    assert total in ({"rows": {"a": 1}}, {"rows": 2}), total


@pytest.mark.parametrize("word", ["NaN", "Infinity", "-Infinity", "1e400"])
def test_a_non_finite_number_is_left_out_with_the_same_warning_in_a_section_too(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, word: str
) -> None:
    body = f'{{"rows": 2, "odd": {word}, "by table": {{"a": 1, "b": {word}}}}}'
    stats = stage_with_reports(tmp_path, {41: Raw(body), 42: {"rows": 1, "odd": 5}})
    with caplog.at_level(logging.WARNING, logger="etlstage"):
        total = stats.reports()
    assert total == {"rows": 3, "odd": 5, "by table": {"a": 1}}, total
    assert json.loads(json.dumps(total, allow_nan=False)) == total
    warned = [r.getMessage() for r in caplog.records if "holds more than finite numbers" in r.getMessage()]
    assert warned == [
        f"stage load: {tmp_path / 'report-41.json'} holds more than finite numbers and sections of them: "
        "the rest is ignored"
    ]
