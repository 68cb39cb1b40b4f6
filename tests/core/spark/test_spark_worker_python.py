"""Spark's Python processes on a local master import pyspark from the installed package, not
from Spark's source zip (etlstage/spark/setup/worker_python.py): the launcher, where it is
written, when it is not used, and a real run's workers."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from etlstage.errors import StateError
from etlstage.spark.setup import worker_python
from etlstage.spark.setup.worker_python import bundled_zips, launcher_text, spark_python
from tests.support.run_cli import RUN_ONCE

PYSPARK_ZIP = "/opt/py spark's/lib/pyspark.zip"  # a space and a quote: quoted in the script
PY4J_ZIP = "/opt/py spark's/lib/py4j-1-src.zip"


def _output(python: Path | str, code: str, *args: str, env: dict[str, str] | None = None) -> str:
    """What ``python -c code args`` prints (``python``: a launcher or an interpreter)."""
    return subprocess.run(
        [str(python), "-c", code, *args], env=env, capture_output=True, text=True, check=True, timeout=60
    ).stdout.rstrip("\n")


def _path_seen(launcher: Path, pythonpath: str | None) -> list[str]:
    """PYTHONPATH as a Python started through ``launcher`` sees it."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    if pythonpath is not None:
        env["PYTHONPATH"] = pythonpath
    return _output(launcher, "import os; print(os.environ.get('PYTHONPATH', '<unset>'))", env=env).split(":")


def _write(tmp_path: Path, zips: list[str]) -> Path:
    script = tmp_path / "launcher"
    script.write_text(launcher_text(sys.executable, zips))
    script.chmod(0o700)
    return script


def test_the_launcher_takes_sparks_zips_off_the_front_and_keeps_the_rest(tmp_path: Path) -> None:
    script = _write(tmp_path, [PYSPARK_ZIP, PY4J_ZIP])
    # Spark's order: its zips, then its own jar, then the user's PYTHONPATH
    assert _path_seen(script, f"{PYSPARK_ZIP}:{PY4J_ZIP}:/spark/core.jar:/mine") == ["/spark/core.jar", "/mine"]
    assert _path_seen(script, f"{PYSPARK_ZIP}:{PY4J_ZIP}") == [""]
    assert _path_seen(script, PYSPARK_ZIP) == [""]
    # anything not in Spark's order is left as it is: the zip then imports as before
    assert _path_seen(script, f"/mine:{PYSPARK_ZIP}") == ["/mine", PYSPARK_ZIP]
    assert _path_seen(script, f"{PYSPARK_ZIP}x:/mine") == [f"{PYSPARK_ZIP}x", "/mine"]
    assert _path_seen(script, None) == ["<unset>"]


def test_the_launcher_passes_its_arguments_on_untouched(tmp_path: Path) -> None:
    script = _write(tmp_path, [PYSPARK_ZIP])
    args = ["a b", "$HOME", "'q'", ""]
    assert _output(script, "import sys; print(repr(sys.argv[1:]))", *args) == repr(args)


def test_a_process_started_through_the_launcher_imports_the_installed_pyspark(tmp_path: Path) -> None:
    import pyspark

    zips = bundled_zips()
    assert zips and zips[0].endswith("/python/lib/pyspark.zip") and os.path.exists(zips[0])
    script = _write(tmp_path, zips)
    env = {**os.environ, "PYTHONPATH": ":".join([*zips, "/elsewhere"])}
    where = "import pyspark; print(pyspark.__file__)"
    assert _output(script, where, env=env) == os.path.abspath(pyspark.__file__)
    # and without the launcher Spark's processes take it from the zip: what this avoids
    assert _output(sys.executable, where, env=env).startswith(zips[0])


def test_written_owner_only_in_the_state_folder_for_local_masters_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("PYSPARK_PYTHON", raising=False)
    monkeypatch.delenv("SPARK_HOME", raising=False)
    state = tmp_path / "state"
    made = spark_python("local[2]", state)
    assert made == str(state / "spark" / "python-launcher")
    assert stat.S_IMODE(os.stat(made).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(state / "spark").st_mode) == 0o700
    assert Path(made).read_text() == launcher_text(sys.executable, bundled_zips())
    assert [p.name for p in (state / "spark").iterdir()] == ["python-launcher"]  # no part file left
    assert spark_python("spark://127.0.0.1:7077", tmp_path / "other") is None  # executors elsewhere
    assert spark_python("sc://127.0.0.1:15002", tmp_path / "other") is None
    assert not (tmp_path / "other").exists()
    monkeypatch.setenv("PYSPARK_PYTHON", "/opt/their/python3")  # the user's choice stands
    assert spark_python("local[2]", tmp_path / "other") is None


def test_not_used_when_sparks_home_is_another_spark(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A Spark distribution of its own may hold another pyspark than the installed one."""
    monkeypatch.delenv("PYSPARK_PYTHON", raising=False)
    monkeypatch.setenv("SPARK_HOME", str(tmp_path / "spark-4.0"))
    assert bundled_zips() == []
    assert spark_python("local[2]", tmp_path / "state") is None


def test_a_state_folder_others_can_change_is_refused_by_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PYSPARK_PYTHON", raising=False)
    monkeypatch.delenv("SPARK_HOME", raising=False)
    state = tmp_path / "state"
    state.mkdir()
    (tmp_path / "elsewhere").mkdir()
    (state / "spark").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(StateError, match="symbolic link"):
        spark_python("local[2]", state)
    assert list((tmp_path / "elsewhere").iterdir()) == []


def test_a_launcher_that_cannot_be_written_costs_only_speed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.delenv("PYSPARK_PYTHON", raising=False)
    monkeypatch.delenv("SPARK_HOME", raising=False)

    def refused(*args: object, **kwargs: object) -> int:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(worker_python.os, "open", refused)
    assert spark_python("local[2]", tmp_path / "state") is None
    assert "python-launcher: Permission denied" in caplog.text


@pytest.mark.slow  # a Spark run (its own JVM)
@pytest.mark.timeout(300)
def test_a_spark_runs_workers_see_no_pyspark_zip_on_their_path(pdir) -> None:
    """The engine's own run (local master): its tasks start the workers, which inherit the
    Python processes' environment; none of them sees Spark's source zip first."""
    pdir.write("""
        stages:
          - {name: ext, type: E, command: ["{PY}", "{TW}", count, "3"]}
          - {name: env, type: T, command: ["{PY}", "{TW}", env, PYTHONPATH]}
          - {name: load, type: L, command: ["{PY}", "{TW}", append, out.txt]}
    """)
    env = {k: v for k, v in os.environ.items() if k != "PYSPARK_PYTHON"}  # as a user's shell has it
    run = subprocess.run(
        [*RUN_ONCE, "--engine", "spark", "--master", "local[2]"],
        cwd=pdir.path, env=env, capture_output=True, text=True, timeout=240,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    seen = pdir.lines("out.txt")
    assert len(seen) == 3
    assert not any("pyspark.zip" in line for line in seen), seen
    assert (pdir.path / ".etlstage" / "stages" / "spark" / "python-launcher").exists()
