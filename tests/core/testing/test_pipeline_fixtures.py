"""`etlstage test` and the `pipeline_test` fixture: a whole pipeline from input files to
expected outputs, run for real in a copy of its folder."""

from __future__ import annotations

import textwrap
from pathlib import Path

import psutil
import pytest

from etlstage.errors import ConfigError
from etlstage.testing import load_tests
from tests.conftest import PY, TW
from tests.support.paths import FIXTURES
from tests.support.run_cli import etlstage
from tests.support.waiting import wait_for

STAGES = f"""
name: words
stages:
  - {{name: src, type: E, mode: cyclic, command: ["{PY}", "{FIXTURES / "lines.py"}", input.txt, "2"]}}
  - {{name: up, type: T, mode: batch, batch_size: 2, command: ["{PY}", "{TW}", upper]}}
  - {{name: sink, type: L, mode: batch, batch_size: 3, command: ["{PY}", "{TW}", append, words.txt]}}
"""

TESTS = """
pipeline: stages.yaml
timeout: 60
cases:
  - name: upper-cases every word
    files:
      input.txt: "abc\\nde\\nf\\n"
    expect:
      files:
        words.txt: "ABC\\nDE\\nF\\n"
  - name: in any order
    files:
      input.txt: "x\\ny\\n"
    expect:
      files:
        words.txt: {lines: ["Y", "X"], ordered: false}
  - name: wrong on purpose
    files:
      input.txt: "abc\\n"
    expect:
      files:
        words.txt: "abc\\n"
        other.txt: "nothing\\n"
"""


def _folder(tmp_path: Path, tests: str = TESTS) -> Path:
    folder = tmp_path / "pipe"
    folder.mkdir()
    (folder / "stages.yaml").write_text(STAGES)
    (folder / "words.test.yaml").write_text(textwrap.dedent(tests))
    return folder


def test_etlstage_test_runs_each_case_for_real_and_shows_what_differs(tmp_path):
    folder = _folder(tmp_path)
    r = etlstage(folder, "test", "words.test.yaml", timeout=300)
    assert r.code == 1, r.stdout + r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].startswith("PASS  upper-cases every word"), r.stdout
    assert lines[1].startswith("PASS  in any order"), r.stdout
    assert lines[2].startswith("FAIL  wrong on purpose"), r.stdout
    assert "words.txt differs:" in r.stdout and "-abc" in r.stdout and "+ABC" in r.stdout
    assert "other.txt: not written" in r.stdout
    assert "3 case(s): 2 passed, 1 failed" in r.stdout
    # the failed case's folder is kept, holding what the run wrote
    kept = Path(r.stdout.split("(the case's folder: ")[1].split(")")[0])
    assert (kept / "pipe" / "words.txt").read_text() == "ABC\n"
    # the pipeline's own folder is untouched: no input, no output, no state
    assert sorted(p.name for p in folder.iterdir()) == ["stages.yaml", "words.test.yaml"]


def test_one_case_by_name_and_a_passing_file_exits_0(tmp_path):
    folder = _folder(tmp_path)
    r = etlstage(folder, "test", "words.test.yaml", "--case", "in any order", timeout=120)
    assert r.code == 0, r.stdout + r.stderr
    assert "1 case(s): 1 passed, 0 failed" in r.stdout


def test_the_pytest_fixture_runs_cases_and_fails_with_the_report(tmp_path, pipeline_test):
    folder = _folder(tmp_path)
    (result,) = pipeline_test(folder / "words.test.yaml", "upper-cases every word")
    assert result.passed and result.exit_status == 0
    with pytest.raises(AssertionError, match=r"(?s)pipeline test 'wrong on purpose' failed.*other.txt"):
        pipeline_test(folder / "words.test.yaml", "wrong on purpose")


def test_a_case_that_hangs_is_stopped_at_its_timeout(tmp_path):
    folder = _folder(tmp_path)
    (folder / "stages.yaml").write_text(
        STAGES.replace(f'["{PY}", "{FIXTURES / "lines.py"}", input.txt, "2"]', '["sleep", "300"]').replace(
            "mode: cyclic", "mode: plain"
        )
    )
    (case,) = [c for c in load_tests(folder / "words.test.yaml") if c.name == "in any order"]
    case.timeout = 3
    result = case.run(tmp_path)
    assert result.exit_status is None
    assert result.problems[0] == "the run did not end within 3s: stopped", result.problems


def test_a_case_stopped_at_its_timeout_leaves_no_child_of_its_workers(tmp_path):
    """The workers run in sessions of their own: stopping the run's process group alone
    left what they started running."""
    folder = _folder(tmp_path)
    pid_file = tmp_path / "child.pid"
    hang = f'["sh", "-c", "sleep 300 & echo $! > {pid_file}; wait"]'
    (folder / "stages.yaml").write_text(
        STAGES.replace(f'["{PY}", "{FIXTURES / "lines.py"}", input.txt, "2"]', hang).replace(
            "mode: cyclic", "mode: plain"
        )
    )
    (case,) = [c for c in load_tests(folder / "words.test.yaml") if c.name == "in any order"]
    case.timeout = 3
    result = case.run(tmp_path)
    assert result.exit_status is None, result.problems
    child = int(wait_for(lambda: pid_file.exists() and pid_file.read_text().strip(), 5, "the child's pid"))

    def gone() -> bool:
        try:
            return psutil.Process(child).status() == psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return True

    wait_for(gone, 10, f"the worker's child {child} to be gone")


@pytest.mark.parametrize(
    ("tests", "says"),
    [
        ("cases: []", "words.test.yaml:1: cases:"),
        ("cases:\n  - name: a\n    expect: {exit_staus: 1}", "words.test.yaml:3: cases[0].expect"),
        ("cases:\n  - name: a\n    files: {/etc/passwd: x}", "cases[0].files./etc/passwd: a path inside"),
        ("cases:\n  - name: a\n    expect: {files: {../x: y}}", "a path inside the pipeline's folder"),
        ("cases:\n  - {name: a}\n  - {name: a}", "words.test.yaml:3: cases[1].name: 'a' names two cases"),
        ("pipeline: nope.yaml\ncases:\n  - {name: a}", "words.test.yaml:1: pipeline: no such pipeline file"),
        ("cases: [", "words.test.yaml:1:9: not valid YAML"),
    ],
)
def test_a_wrong_test_file_is_refused_naming_the_place(tmp_path, tests, says):
    folder = _folder(tmp_path, tests)
    with pytest.raises(ConfigError, match=None) as err:
        load_tests(folder / "words.test.yaml")
    assert says in str(err.value), str(err.value)


def test_the_cli_refuses_a_wrong_test_file_with_exit_2_and_no_traceback(tmp_path):
    folder = _folder(tmp_path, "cases:\n  - {name: a, file: {}}")
    r = etlstage(folder, "test", "words.test.yaml")
    assert r.code == 2, r.stdout + r.stderr
    assert r.stderr.startswith("etlstage: ") and "words.test.yaml:2: cases[0]" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr


def test_a_state_dir_outside_the_pipeline_folder_is_refused(tmp_path):
    folder = _folder(tmp_path)
    (folder / "stages.yaml").write_text(STAGES.replace("name: words", f"name: words\nstate_dir: {tmp_path / 'st'}"))
    (case,) = [c for c in load_tests(folder / "words.test.yaml") if c.name == "in any order"]
    result = case.run(tmp_path)
    assert "is outside the pipeline's folder" in result.problems[0], result.problems
    assert not (tmp_path / "st").exists()


def test_expected_lines_in_any_order_name_what_is_missing_and_what_is_extra():
    from etlstage.testing.pipeline import Expected

    unordered = Expected(lines=("A", "B", "B"), ordered=False)
    assert unordered.problems("o.txt", "B\nA\nB\n") == []
    assert unordered.problems("o.txt", "B\nA\nC\n") == [
        "o.txt: 1 line(s) missing, e.g. 'B'",
        "o.txt: 1 line(s) not expected, e.g. 'C'",
    ]
    assert Expected(lines=("A", "B")).problems("o.txt", "B\nA\n")[0] == "o.txt differs:"
    assert Expected(text="x").problems("o.txt", None) == ["o.txt: not written"]


def test_an_unexpected_exit_status_fails_the_case(tmp_path):
    folder = _folder(tmp_path)
    (case,) = [c for c in load_tests(folder / "words.test.yaml") if c.name == "in any order"]
    case.exit_status = 1
    result = case.run(tmp_path)
    assert result.problems == ["the run ended with exit status 0, expected 1"], result.report()


def test_a_cases_folder_holds_the_dependencies_but_not_outputs_or_state(tmp_path):
    folder = _folder(tmp_path)
    # a real run's output, its state, and a Node worker's installed dependency (npm links a
    # local package with a relative link)
    (folder / "words.txt").write_text("STALE\n" * 1000)
    (folder / ".etlstage").mkdir()
    (folder / ".etlstage" / "state.db").write_text("old")
    (tmp_path / "sdk").mkdir()
    (tmp_path / "sdk" / "index.js").write_text("module.exports = 1;\n")
    (folder / "node_modules").mkdir()
    (folder / "node_modules" / "dep").symlink_to(Path("..") / ".." / "sdk")
    (case,) = [c for c in load_tests(folder / "words.test.yaml") if c.name == "upper-cases every word"]
    result = case.run(tmp_path)
    assert result.passed, result.report()  # the stale words.txt was not copied and appended to
    copy = result.folder / "pipe"
    assert (copy / "node_modules" / "dep" / "index.js").read_text() == "module.exports = 1;\n"
    assert not (copy / ".etlstage" / "state.db").exists()


FAILING = """
name: failing
stages:
  - {name: src, type: E, mode: cyclic, command: ["{PY}", "{LINES}", input.txt, "2"]}
  - {name: up, type: T, restart: {max_restarts: 5, backoff: 4}, command: ["{PY}", "-c", "import sys; sys.stdin.read(1); sys.exit(3)"]}
  - {name: sink, type: L, command: ["{PY}", "{TW}", append, words.txt]}
"""


def test_a_case_expecting_a_failure_does_not_wait_out_the_restart_backoff(tmp_path):
    folder = _folder(tmp_path)
    (folder / "stages.yaml").write_text(
        FAILING.replace("{PY}", PY).replace("{LINES}", str(FIXTURES / "lines.py")).replace("{TW}", str(TW))
    )
    (case,) = [c for c in load_tests(folder / "words.test.yaml") if c.name == "in any order"]
    case.exit_status = 1
    case.expect_files = {}
    result = case.run(tmp_path)
    assert result.passed, result.report()
    assert "(try 6 of 6)" in result.stderr, result.stderr  # every restart the stage allows was made
    assert result.seconds < 20  # its five restarts would wait 4+8+16+30+30 s
