"""bench/mutation.py's own rules: which tests a mutant runs first, and what counts as a kill."""

from __future__ import annotations

import sys
from pathlib import Path

from tests.support.paths import ROOT

sys.path.insert(0, str(ROOT / "bench"))
import mutation


def test_a_mutant_first_runs_the_tests_of_every_line_it_changes() -> None:
    m = mutation.Mutant("etlstage/x.py", 10, "drop", "call(\n    a,\n    b)", "pass", 0, 0)
    line_tests: mutation.LineTests = {
        "etlstage/x.py": {9: {"t::before"}, 10: {"t::a"}, 11: {"t::b", "t::a"}, 12: {"t::c"}, 13: {"t::after"}},
        "etlstage/y.py": {10: {"t::other_file"}},
    }
    assert mutation.covering(m, line_tests) == ["t::a", "t::b", "t::c"]


def test_a_mutant_no_test_executes_selects_nothing_first() -> None:
    m = mutation.Mutant("etlstage/x.py", 3, "return", "", "return\n    ", 0, 0)
    assert mutation.covering(m, {"etlstage/x.py": {4: {"t::a"}}}) == []


def test_only_a_failing_test_kills_a_usage_error_is_no_verdict(tmp_path: Path) -> None:
    (tmp_path / "test_fails.py").write_text("def test_x():\n    assert False\n")
    (tmp_path / "test_passes.py").write_text("def test_x():\n    pass\n")
    (tmp_path / "test_broken.py").write_text("import no_such_module_here\n")
    assert mutation.run_tests(tmp_path, ["test_fails.py"], 60)[0] == "failed"
    assert mutation.run_tests(tmp_path, ["test_passes.py"], 60)[0] == "passed"
    assert mutation.run_tests(tmp_path, ["test_broken.py"], 60)[0] == "failed"  # a mutant that breaks an import
    assert mutation.run_tests(tmp_path, ["test_passes.py::no_such_test"], 60)[0] == "error"


def test_placeholders_of_an_interface_and_reprs_are_not_mutated(tmp_path: Path, monkeypatch) -> None:
    (tmp_path / "m.py").write_text(
        "class Base:\n"
        "    def read(self):\n"
        '        """Subclasses read."""\n'
        "        raise NotImplementedError\n"
        "    def size(self): ...\n"
        "    def __repr__(self):\n"
        "        return 'Base(' + str(1 < 2) + ')'\n"
        "    def real(self, x):\n"
        "        return x < 1\n"
    )
    monkeypatch.setattr(mutation, "ROOT", tmp_path)
    lines = {m.line for m in mutation.mutants_of("m.py")}
    assert lines == {9}, lines  # only the method with behaviour (a repr is for debugging)


def test_no_early_return_before_a_return_of_none(tmp_path: Path, monkeypatch) -> None:
    """``return`` put before ``return None`` (or a bare ``return``) changes nothing: such a
    mutant could only survive, so none is made; an early return elsewhere still is."""
    (tmp_path / "m.py").write_text(
        'def none():\n    """Nothing known."""\n    return None\ndef bare():\n    return\ndef value():\n    return 1\n'
    )
    monkeypatch.setattr(mutation, "ROOT", tmp_path)
    returns = [m.line for m in mutation.mutants_of("m.py") if m.kind == "return"]
    assert returns == [7], returns


def test_a_test_run_that_dies_by_a_signal_kills_the_mutant(tmp_path: Path) -> None:
    """A mutant that makes the code kill the wrong process (its own test run) or crash the
    interpreter ends pytest by a signal: the tests did not pass, so the mutant is killed."""
    (tmp_path / "test_dies.py").write_text(
        "import os, signal\ndef test_x():\n    os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    assert mutation.run_tests(tmp_path, ["test_dies.py"], 60)[0] == "failed"


def test_a_rerun_counts_the_earlier_kills_and_its_own_and_never_a_mutant_it_could_not_run() -> None:
    """--survivors-of: of 5, 2 killed before (one by the time limit), 2 survivors and 1 with no
    verdict run again (one of them killed now), and the fifth's code gone (not run): 3 killed."""
    m = mutation.Mutant("etlstage/x.py", 1, "drop", "a", "pass", 0, 1)
    earlier = [{"status": s} for s in ("killed", "timeout", "survived", "error", "survived")]
    now = [mutation.Outcome(m, "killed", 1.0), mutation.Outcome(m, "survived", 1.0)]
    assert mutation.killed_with_earlier(earlier, now) == 3


def test_parallel_jobs_each_mutate_only_their_own_copy_and_every_outcome_is_reported(
    tmp_path: Path, monkeypatch
) -> None:
    source = "def f(x):\n    return x < 2\n"
    copies = []
    for i in range(2):
        copy = tmp_path / f"job{i}"
        copy.mkdir()
        (copy / "m.py").write_text(source)
        (copy / "test_m.py").write_text("from m import f\ndef test_f():\n    assert f(1) and not f(2)\n")
        copies.append(copy)
    monkeypatch.setattr(mutation, "tests_for", lambda path: ["test_m.py"])
    at = source.index("<")
    flipped = mutation.Mutant("m.py", 2, "flip", "<", ">=", at, at + 1)  # f(1) false: killed
    moved = mutation.Mutant("m.py", 2, "boundary", "<", "<=", at, at + 1)  # f(2) true: killed
    same = mutation.Mutant("m.py", 2, "noop", "<", "<", at, at + 1)  # the same code: survives
    outcomes = list(mutation.evaluate_in_parallel(copies, [flipped, moved, same], mutation.Limits(60), {}))
    assert sorted((o.mutant.kind, o.status) for o in outcomes) == [
        ("boundary", "killed"),
        ("flip", "killed"),
        ("noop", "survived"),
    ]
    assert all((c / "m.py").read_text() == source for c in copies)  # every copy put back


def test_a_run_is_limited_by_its_tests_baseline_times_and_an_unknown_test_gets_the_ceiling() -> None:
    durations = {"tests/a/test_x.py::test_1": 2.0, "tests/a/test_x.py::T::test_2[p]": 3.0, "tests/b/test_y.py::t": 50.0}
    assert mutation.limit_for(["tests/a/test_x.py::test_1"], durations, 10.0, 300.0) == 10.0 + mutation.SLACK * 2
    assert mutation.limit_for(["tests/a/test_x.py"], durations, 10.0, 300.0) == 10.0 + mutation.SLACK * 5
    assert mutation.limit_for(["tests/b/test_y.py"], durations, 10.0, 100.0) == 100.0  # within the ceiling
    assert mutation.limit_for(["tests/a/test_x.py::gone"], durations, 10.0, 300.0) == 300.0
    assert mutation.limit_for(["tests/c/test_new.py"], durations, 10.0, 300.0) == 300.0
    assert mutation.Limits(300.0).of(["tests/a/test_x.py::test_1"]) == 300.0  # no baseline times: the ceiling


def test_baseline_times_are_read_under_the_node_ids_coverage_names(tmp_path: Path) -> None:
    """The JUnit report's class names map back to the node ids the per-test coverage
    contexts use (a module in a package, a class, a parametrized test)."""
    (tmp_path / "tests" / "pkg").mkdir(parents=True)
    (tmp_path / "tests" / "__init__.py").write_text("")
    (tmp_path / "tests" / "pkg" / "__init__.py").write_text("")
    (tmp_path / "tests" / "pkg" / "test_m.py").write_text(
        "import pytest\n"
        "def test_plain():\n    pass\n"
        "class TestGroup:\n"
        "    @pytest.mark.parametrize('x', [1, 2])\n"
        "    def test_each(self, x):\n        pass\n"
    )
    xml = tmp_path / "base.xml"
    assert mutation.run_tests(tmp_path, ["tests/pkg/test_m.py"], 60, (f"--junitxml={xml}",))[0] == "passed"
    assert sorted(mutation.read_durations(xml)) == [
        "tests/pkg/test_m.py::TestGroup::test_each[1]",
        "tests/pkg/test_m.py::TestGroup::test_each[2]",
        "tests/pkg/test_m.py::test_plain",
    ]


def test_a_hang_is_stopped_by_its_tests_baseline_time_not_the_ceiling(tmp_path: Path, monkeypatch) -> None:
    source = "def done(x):\n    return x > 0\n"
    (tmp_path / "m.py").write_text(source)
    (tmp_path / "test_m.py").write_text("from m import done\ndef test_f():\n    while not done(1):\n        pass\n")
    monkeypatch.setattr(mutation, "tests_for", lambda path: ["test_m.py"])
    at = source.index(">")
    hangs = mutation.Mutant("m.py", 2, "flip", ">", "<=", at, at + 1)
    limits = mutation.Limits(600.0, {"test_m.py::test_f": 0.01}, start=3.0)
    (outcome,) = mutation.evaluate(tmp_path, [hangs], limits, {})
    assert outcome.status == "timeout"
    assert outcome.seconds < 60, outcome.seconds  # its 3-s limit, not the 600-s ceiling


def test_a_hang_in_one_test_of_a_long_list_is_stopped_by_that_tests_own_limit(tmp_path: Path, monkeypatch) -> None:
    """The run's limit is the whole list's (here 43 s); each test's is its slowest one's (3 s)."""
    source = "def done(x):\n    return x > 0\n"
    (tmp_path / "m.py").write_text(source)
    (tmp_path / "test_m.py").write_text("from m import done\ndef test_f():\n    while not done(1):\n        pass\n")
    monkeypatch.setattr(mutation, "tests_for", lambda path: ["test_m.py"])
    monkeypatch.setattr(mutation, "TEST_FLOOR", 3.0)
    at = source.index(">")
    hangs = mutation.Mutant("m.py", 2, "flip", ">", "<=", at, at + 1)
    durations = {"test_m.py::test_f": 0.01, **{f"test_m.py::t{i}": 0.5 for i in range(20)}}
    limits = mutation.Limits(600.0, durations, start=3.0)
    assert limits.of(["test_m.py"]) > 40 and limits.options(["test_m.py"]) == ("--timeout=3",)
    (outcome,) = mutation.evaluate(tmp_path, [hangs], limits, {})
    assert outcome.status == "killed"  # its test failed by its own limit
    assert outcome.seconds < 30, outcome.seconds
    assert mutation.per_test_limit(["test_m.py::gone"], durations) is None  # not timed: no limit of its own
