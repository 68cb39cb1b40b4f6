"""check-worker on the user's own messages (--sample), and a closing note naming the real cause."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.support.paths import ROOT
from tests.support.run_cli import Run, etlstage

JSON_WORKER = [sys.executable, "tests/fixtures/json_enrich.py"]


def check_worker(*args: str) -> Run:
    return etlstage(ROOT, "check-worker", *args, timeout=300)


def test_a_worker_parsing_json_fails_the_default_messages_and_the_note_quotes_its_error(tmp_path: Path):
    r = check_worker("--type", "T", "--mode", "single", "--", *JSON_WORKER)
    assert r.code == 1
    # the worker's own words, not a guess at another mode
    assert "note: the worker's stderr says: json.decoder.JSONDecodeError: Expecting value" in r.stdout
    assert "--sample FILE (one message a line)" in r.stdout
    assert "may not support" not in r.stdout and "--mode" not in r.stdout.split("failed")[-1]


@pytest.mark.slow  # every mode's checks
def test_every_mode_failing_on_the_messages_suggests_no_other_mode():
    r = check_worker("--type", "T", "--", *JSON_WORKER)
    assert r.code == 1
    assert "may not support" not in r.stdout
    assert "JSONDecodeError" in r.stdout.splitlines()[-2]


def test_the_users_sample_is_what_every_check_sends(tmp_path: Path):
    sample = tmp_path / "sample.jsonl"
    sample.write_text('{"id": 1}\n{"id": 2, "name": "café"}\n{"id": 3}\n{"id": 4}\n', encoding="utf-8")
    r = check_worker("--type", "T", "--sample", str(sample), "--", *JSON_WORKER)
    assert r.code == 0, r.stdout
    assert "FAIL" not in r.stdout
    assert "PASS  non-ASCII UTF-8 messages" in r.stdout  # run on the sample's one non-ASCII message
    # no empty line in the sample: the empty-message check says why it did not run
    assert "SKIP  empty messages" in r.stdout and "the sample has no empty message" in r.stdout
    assert r.stdout.rstrip().endswith("7 passed, 0 failed, 1 skipped")


def test_a_sample_the_worker_rejects_fails_with_its_cause(tmp_path: Path):
    sample = tmp_path / "sample.txt"
    sample.write_text('{"id": 1}\nnot json\n', encoding="utf-8")
    r = check_worker("--type", "T", "--mode", "single", "--sample", str(sample), "--", *JSON_WORKER)
    assert r.code == 1
    assert "note: the worker's stderr says: json.decoder.JSONDecodeError" in r.stdout
    assert "--sample FILE" not in r.stdout  # it was given one


def test_a_missing_or_empty_sample_is_a_usage_error(tmp_path: Path):
    r = check_worker("--type", "T", "--sample", str(tmp_path / "nope.txt"), "--", *JSON_WORKER)
    assert r.code == 2 and "--sample" in r.stderr and "nope.txt" in r.stderr and "Traceback" not in r.stderr
    (tmp_path / "empty.txt").write_text("")
    r = check_worker("--type", "T", "--sample", str(tmp_path / "empty.txt"), "--", *JSON_WORKER)
    assert r.code == 2 and "the file is empty" in r.stderr
