"""Class data sharing for the driver's JVM (etlstage/spark/cds.py): an archive is recorded
by a first run, used by the next, and never taken into use unless its JVM exited cleanly
(a JVM mapping a truncated archive dies of SIGBUS)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from etlstage.spark import cds
from tests.support.paths import ROOT

JAVA = "/usr/bin/java (openjdk version 17)"


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "cds"
    monkeypatch.setenv("ETLSTAGE_CDS_CACHE", str(folder))
    monkeypatch.delenv("ETLSTAGE_SPARK_CDS", raising=False)
    monkeypatch.setattr(cds.atexit, "register", lambda *a: None)  # no JVM here to wait for
    return folder


def test_a_first_run_records_and_a_later_one_maps_the_archive(cache: Path) -> None:
    first = cds.java_options(JAVA, {})
    assert first.startswith(f"-XX:ArchiveClassesAtExit={cache}/") and first.endswith(f".part {cds.QUIET}")
    assert cache.stat().st_mode & 0o777 == 0o700
    archive = cache / f"{cds.archive_key(JAVA, {})}.jsa"
    archive.write_bytes(b"x")
    assert cds.java_options(JAVA, {}) == f"-XX:SharedArchiveFile={archive} -Xshare:auto {cds.QUIET}"


def test_another_class_path_or_java_is_another_archive() -> None:
    base = cds.archive_key(JAVA, {})
    assert cds.archive_key(JAVA, {"spark.jars": "/c/delta.jar"}) != base
    assert cds.archive_key(JAVA, {"spark.driver.extraClassPath": "/x"}) != base
    assert cds.archive_key("/opt/jdk21/bin/java (openjdk version 21)", {}) != base
    assert cds.archive_key(JAVA, {"spark.executor.memory": "2g"}) == base  # not the driver's classes


def test_off_by_setting_by_the_users_own_sharing_options_and_in_a_folder_others_can_write(
    cache: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    assert cds.java_options(JAVA, {cds.OPTIONS_KEY: "-Xshare:off"}) == ""
    assert cds.java_options(JAVA, {cds.OPTIONS_KEY: "-XX:SharedArchiveFile=/mine.jsa"}) == ""
    monkeypatch.setenv("ETLSTAGE_SPARK_CDS", "off")
    assert cds.java_options(JAVA, {}) == ""
    monkeypatch.delenv("ETLSTAGE_SPARK_CDS")
    cache.mkdir(mode=0o700)
    cache.chmod(0o777)  # another user could put an archive there for this JVM to load
    assert cds.java_options(JAVA, {}) == ""
    assert "not a folder only this user can write to" in caplog.text


def test_a_cache_folder_with_a_space_is_not_used(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ETLSTAGE_CDS_CACHE", str(tmp_path / "my cache"))  # the options would split there
    monkeypatch.delenv("ETLSTAGE_SPARK_CDS", raising=False)
    assert cds.java_options(JAVA, {}) == ""
    assert not (tmp_path / "my cache").exists()


def test_the_options_join_the_users_own() -> None:
    conf = {cds.OPTIONS_KEY: "-Dmine=1", "spark.x": "y"}
    assert cds.with_options(conf, "-Xshare:auto") == {cds.OPTIONS_KEY: "-Dmine=1 -Xshare:auto", "spark.x": "y"}
    assert cds.with_options(conf, "") is conf


@pytest.mark.parametrize("code", [0, 1])
def test_a_recorded_archive_is_taken_into_use_only_after_its_jvm_exited_cleanly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, code: int
) -> None:
    """A stand-in JVM that writes its archive once its stdin ends, as pyspark's JVM does."""
    from pyspark import SparkContext

    part, archive = tmp_path / "k.abc.part", tmp_path / "k.jsa"
    jvm = subprocess.Popen(
        ["sh", "-c", f"cat >/dev/null; sleep 0.3; printf archive > {part}; exit {code}"], stdin=subprocess.PIPE
    )
    monkeypatch.setattr(SparkContext, "_gateway", SimpleNamespace(proc=jvm))
    cds._take_into_use(part, archive, os.getpid())
    assert jvm.returncode == code  # it was waited for, not left writing
    assert not part.exists()
    assert archive.exists() == (code == 0)


def test_a_forked_child_exiting_leaves_its_parents_jvm_alone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from pyspark import SparkContext

    jvm = subprocess.Popen(["sh", "-c", "cat >/dev/null"], stdin=subprocess.PIPE)
    monkeypatch.setattr(SparkContext, "_gateway", SimpleNamespace(proc=jvm))
    try:
        cds._take_into_use(tmp_path / "k.part", tmp_path / "k.jsa", os.getpid() + 1)
        assert jvm.poll() is None  # its stdin still open: the JVM runs on
    finally:
        jvm.stdin.close()  # type: ignore[union-attr]
        jvm.wait()


def test_clean_up_keeps_the_recent_archives_and_drops_abandoned_parts(cache: Path) -> None:
    cache.mkdir(mode=0o700)
    now = time.time()
    for i in range(cds.KEEP + 2):
        p = cache / f"a{i}.jsa"
        p.write_bytes(b"x")
        os.utime(p, (now - i * 60, now - i * 60))
    old_part, new_part = cache / "b.1.part", cache / "b.2.part"
    for p, age in ((old_part, cds.ABANDONED + 60), (new_part, 5)):
        p.write_bytes(b"x")
        os.utime(p, (now - age, now - age))
    cds._clean_up(cache)
    assert sorted(p.name for p in cache.glob("*.jsa")) == [f"a{i}.jsa" for i in range(cds.KEEP)]
    assert not old_part.exists() and new_part.exists()  # one a JVM may be writing right now stays


SESSION = """
import json
from etlstage.spark.session import start_session
spark = start_session("local[1]", "cds-test", {}, connect_timeout=10, log_level="ERROR")
args = list(spark._jvm.java.lang.management.ManagementFactory.getRuntimeMXBean().getInputArguments())
print(json.dumps({"args": args, "rows": spark.range(10).count()}))
"""


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_two_runs_the_first_records_the_second_maps(tmp_path: Path) -> None:
    env = {**os.environ, "ETLSTAGE_CDS_CACHE": str(tmp_path / "cds"), "PYTHONPATH": str(ROOT)}
    env.pop("ETLSTAGE_SPARK_CDS", None)

    def run() -> list[str]:
        done = subprocess.run([sys.executable, "-c", SESSION], capture_output=True, text=True, env=env, timeout=300)
        assert done.returncode == 0, done.stderr[-3000:]
        assert "[cds]" not in done.stdout + done.stderr  # the JVM's notes on its archive are off
        out = json.loads(done.stdout.strip().splitlines()[-1])
        assert out["rows"] == 10
        return [a for a in out["args"] if "Archive" in a or "Xshare" in a or "Xlog" in a]

    quiet = cds.QUIET.split()
    assert [a.split("=")[0] for a in run()] == ["-XX:ArchiveClassesAtExit", *(q.split("=")[0] for q in quiet)]
    archives = list((tmp_path / "cds").iterdir())
    assert [p.suffix for p in archives] == [".jsa"], archives  # in use once its JVM exited: no .part left
    assert run() == [f"-XX:SharedArchiveFile={archives[0]}", "-Xshare:auto", *quiet]
