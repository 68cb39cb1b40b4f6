"""The Spark engine's lock folder (``$TMPDIR/etlstage-<uid>``) taken by another user first:
the CLI finds it before Spark starts, falls back to a private folder of the user's, and
stops with exit 2 naming the lock folder (not state_dir) only when that fails too."""

from __future__ import annotations

import logging
import os
import stat
import tempfile
import time
from pathlib import Path

import pytest

from etlstage.errors import StateError
from etlstage.spark.tasks.ownership import LOCK_BASE_ENV, choose_lock_base, lock_base
from tests.conftest import PY, TW
from tests.support.run_cli import etlstage

OTHER = 12345  # a uid no one has: "another user"
as_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to give a folder to another user")


def _squat(tmp: Path) -> Path:
    squatted = tmp / f"etlstage-{os.getuid()}"
    squatted.mkdir()
    os.chown(squatted, OTHER, -1)
    squatted.chmod(0o777)
    return squatted


@pytest.fixture
def places(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    tmp, home = tmp_path / "tmp", tmp_path / "home"
    tmp.mkdir()
    home.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_RUNTIME_DIR", "")
    monkeypatch.setenv(LOCK_BASE_ENV, "")  # restored to what it was after the test (choose_lock_base sets it)
    return tmp, home


def test_an_unsquatted_lock_folder_is_the_default_made_owner_only(places: tuple[Path, Path]) -> None:
    tmp, _ = places
    base = choose_lock_base()
    assert base == tmp / f"etlstage-{os.getuid()}" == lock_base()
    assert stat.S_IMODE(base.stat().st_mode) == 0o700 and (base / "owners").is_dir()
    assert os.environ[LOCK_BASE_ENV] == str(base)  # what Spark's processes inherit


@as_root
def test_a_squatted_lock_folder_is_left_for_a_private_one(places: tuple[Path, Path], caplog) -> None:
    tmp, home = places
    squatted = _squat(tmp)
    assert lock_base().is_relative_to(home)  # a process deciding alone (an executor) falls back too
    with caplog.at_level(logging.WARNING, logger="etlstage.spark"):
        base = choose_lock_base()
    assert base.is_relative_to(home / ".cache" / "etlstage") and stat.S_IMODE(base.stat().st_mode) == 0o700
    assert f"the Spark engine's lock folder {squatted} belongs to uid {OTHER}" in caplog.text
    assert f"using {base} instead" in caplog.text
    assert list(squatted.iterdir()) == []


@as_root
def test_no_usable_lock_folder_is_a_state_error_naming_both(places: tuple[Path, Path]) -> None:
    tmp, home = places
    squatted = _squat(tmp)
    os.chown(home, OTHER, -1)
    with pytest.raises(StateError, match=rf"lock folder {squatted} belongs to uid {OTHER}.*TMPDIR.*fallback") as exc:
        choose_lock_base()
    assert "state_dir" not in str(exc.value)


@as_root
def test_the_cli_stops_with_exit_2_before_spark_starts(tmp_path: Path) -> None:
    tmp, home = tmp_path / "tmp", tmp_path / "home"
    tmp.mkdir()
    home.mkdir()
    squatted = _squat(tmp)
    os.chown(home, OTHER, -1)
    (tmp_path / "stages.yaml").write_text(
        f"""
stages:
  - {{name: src, type: E, command: [{PY}, {TW}, count, "10"]}}
  - {{name: t, type: T, partition_by: "", command: [{PY}, {TW}, pass]}}
  - {{name: sink, type: L, command: [{PY}, {TW}, append, out.txt]}}
engine: {{kind: spark, master: "local[1]"}}
"""
    )
    env = {"TMPDIR": str(tmp), "HOME": str(home), "XDG_RUNTIME_DIR": "", LOCK_BASE_ENV: ""}
    started = time.monotonic()
    r = etlstage(tmp_path, "run", "stages.yaml", "--once", "--no-progress", env=env, timeout=60)
    assert r.code == 2, r.stderr
    assert time.monotonic() - started < 20  # no JVM was started
    assert f"the Spark engine's lock folder {squatted} belongs to uid {OTHER}" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr and "state_dir" not in r.stderr, r.stderr
    assert not (tmp_path / ".etlstage").exists()  # before anything of the run
