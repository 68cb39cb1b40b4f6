"""The stock Spark loader starts Spark with its first batch: a run with nothing to load starts no JVM.

Java is reached through a JAVA_HOME whose ``bin/java`` notes each call in a file and then
runs the real java: the file says whether any JVM ran (``java -version`` included), however
briefly.  The Spark engine has no such case: there the loader is a sink of the engine's own
session, which the engine starts to read its sources.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import stat
import subprocess
import threading
import time
from pathlib import Path

import pytest
from etlstage_workers.spark.session import LazySession

from tests.conftest import PY
from tests.support.paths import FIXTURES
from tests.support.run_cli import etlstage


def noting_java(tmp: Path) -> tuple[dict[str, str], Path]:
    """A JAVA_HOME whose java notes each call in the returned file, then runs the real one."""
    real = os.path.realpath(shutil.which("java") or pytest.skip("no java on PATH"))
    home = tmp / "java-home"
    (home / "bin").mkdir(parents=True)
    calls = tmp / "java-calls"
    java = home / "bin" / "java"
    java.write_text(f'#!/bin/sh\necho "$*" >> {calls}\nexec {real} "$@"\n')
    java.chmod(java.stat().st_mode | stat.S_IXUSR)
    return {"JAVA_HOME": str(home)}, calls


def pipeline(tmp: Path, lines: list[dict[str, object]], fmt: str) -> None:
    data = tmp / "in.jsonl"
    data.write_text("".join(json.dumps(line) + "\n" for line in lines))
    (tmp / "stages.yaml").write_text(
        f"""
stages:
  - {{name: src, type: E, mode: cyclic, command: [{PY}, {FIXTURES / "lines.py"}, {data}, "10"]}}
  - {{name: load, type: L, mode: batch,
     command: [etlstage-spark-load, --format, {fmt}, --output, out, --columns, "id:long=/id", --key, /id,
               --master, "local[1]"],
     timeouts: {{startup: 600, request: 600}}}}
"""
    )


@pytest.mark.parametrize("fmt", ["parquet", "delta"])
def test_a_run_with_nothing_to_load_starts_no_jvm(tmp_path: Path, fmt: str) -> None:
    env, calls = noting_java(tmp_path)
    pipeline(tmp_path, [], fmt)
    run = etlstage(tmp_path, "run", "--once", "--no-progress", "stages.yaml", timeout=300, env=env)
    assert run.code == 0, run.stderr[-3000:]
    assert not calls.exists(), f"a JVM ran: {calls.read_text()}"
    assert "start-up: Spark starts with the first batch" in run.stderr
    assert not [p for p in (tmp_path / "out").iterdir() if not p.name.startswith("_")]


@pytest.mark.slow  # a JVM
@pytest.mark.timeout(600)
def test_the_first_batch_starts_spark_and_is_loaded(tmp_path: Path) -> None:
    """The counterpart: the same pipeline with work runs java (so the test above can see one)."""
    env, calls = noting_java(tmp_path)
    pipeline(tmp_path, [{"id": i} for i in range(3)], "parquet")
    run = etlstage(tmp_path, "run", "--once", "--no-progress", "stages.yaml", timeout=600, env=env)
    assert run.code == 0, run.stderr[-3000:]
    assert calls.exists() and "-version" in calls.read_text()
    for phase in ("starting Spark (master local[1]) for the first batch", "Spark's JVM is running", "session ready"):
        assert phase in run.stderr, run.stderr[-3000:]
    for noise in ("Using incubator modules", "native-hadoop", "default log4j profile", "SPARK_LOCAL_IP"):
        assert noise not in run.stderr, f"{noise!r} at the default level"
    import pyarrow.dataset as ds

    assert sorted(ds.dataset(tmp_path / "out", format="parquet").to_table()["id"].to_pylist()) == [0, 1, 2]


def test_lazy_session_starts_once_on_its_own_thread() -> None:
    began: list[str] = []
    gate = threading.Event()

    def start() -> str:
        began.append(threading.current_thread().name)
        gate.wait(10)
        return "session"

    lazy = LazySession(start)  # type: ignore[arg-type]
    assert not lazy.begun and lazy.started() is None
    lazy.begin()
    lazy.begin()
    assert lazy.begun
    gate.set()
    assert lazy.get() == "session" and lazy.started() == "session"
    assert began == ["spark-start"]


def test_lazy_session_raises_its_start_error_to_each_caller() -> None:
    def start() -> object:
        time.sleep(0.01)
        raise RuntimeError("no java")

    lazy = LazySession(start)  # type: ignore[arg-type]
    for _ in range(2):
        with pytest.raises(RuntimeError, match="no java"):
            lazy.get()
    assert lazy.started() is None


def test_a_given_session_is_used_as_it_is() -> None:
    lazy = LazySession(lambda: pytest.fail("not started: one was given"), given="theirs")  # type: ignore[arg-type]
    assert lazy.begun and lazy.get() == "theirs"


def loader_alone(tmp: Path, *options: str, **env: str) -> subprocess.CompletedProcess[str]:
    """``etlstage-spark-load --format delta`` as a stage's worker, its stdin closed at once (no batch)."""
    scenario = {"ETLSTAGE_TYPE": "L", "ETLSTAGE_MODE": "batch", "ETLSTAGE_BATCH_SIZE": "100"}
    argv = [PY, "-m", "etlstage_workers.spark", "--format", "delta", "--output", "out"]
    return subprocess.run(
        [*argv, "--columns", "id:long=/id", "--key", "/id", *options],
        cwd=tmp,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **scenario, **env},
    )


def test_jars_out_of_reach_stop_the_loader_in_seconds_and_spark_jars_packages_goes_around(tmp_path: Path) -> None:
    with socket.socket() as closed:  # bound, never listening: refused
        closed.bind(("127.0.0.1", 0))
        nowhere = {
            "ETLSTAGE_MAVEN_REPOSITORY": f"http://127.0.0.1:{closed.getsockname()[1]}/maven2",
            "ETLSTAGE_JAR_CACHE": str(tmp_path / "empty-cache"),
            "HOME": str(tmp_path),  # no Maven settings or local repository of the user's
        }
        began = time.monotonic()
        refused = loader_alone(tmp_path, **nowhere)
        took = time.monotonic() - began
        assert refused.returncode == 2, refused.stderr[-2000:]
        assert "the jars of --format delta" in refused.stderr and "cannot reach the Maven repository" in refused.stderr
        assert "spark.jars.packages" in refused.stderr and "Traceback" not in refused.stderr
        assert took < 30, took  # the process's start and a refused connection, not Maven's time-outs
        theirs = loader_alone(tmp_path, "--conf", "spark.jars.packages=io.delta:delta-spark_4.2_2.13:4.4.0", **nowhere)
        assert theirs.returncode == 0, theirs.stderr[-2000:]
        assert "jars: fetching" not in theirs.stderr
