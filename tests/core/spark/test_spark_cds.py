"""Class data sharing for the driver's JVM (etlstage/spark/setup/cds.py): an archive is recorded
by a first run, used by the next, and never taken into use unless its JVM logged that it
wrote it (a JVM mapping a truncated archive dies of SIGBUS); the run that records it does
not wait for the JVM longer than cds.EXIT_WAIT (a supervisor stops a slow worker)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from etlstage.spark.setup import cds
from tests.support.paths import ROOT

JAVA = "/usr/bin/java (openjdk version 17)"


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "cds"
    monkeypatch.setenv("ETLSTAGE_CDS_CACHE", str(folder))
    monkeypatch.delenv("ETLSTAGE_SPARK_CDS", raising=False)
    monkeypatch.setattr(cds.atexit, "register", lambda *a: recorded_at_exit.append(a))  # no JVM here to wait for
    recorded_at_exit.clear()
    return folder


recorded_at_exit: list[tuple[object, ...]] = []  # what a test's recording run asked to do at exit


def _recording(options: str) -> Path:
    """The part a recording run's options have its JVM write."""
    first = options.split()[0]
    assert first.startswith("-XX:ArchiveClassesAtExit="), options
    return Path(first.removeprefix("-XX:ArchiveClassesAtExit="))


def test_a_first_run_records_and_a_later_one_maps_the_archive(cache: Path) -> None:
    first = cds.java_options(JAVA, {})
    part = str(_recording(first))
    assert part.startswith(f"{cache}/") and part.endswith(".part")
    assert first == f"-XX:ArchiveClassesAtExit={part} {cds.QUIET} -Xlog:cds+dynamic=info:file={part}.log::filecount=0"
    assert cache.stat().st_mode & 0o777 == 0o700
    archive = cache / f"{cds.archive_key(JAVA, {})}.jsa"
    assert recorded_at_exit == [(cds._take_into_use, Path(part), archive, os.getpid())]  # its JVM waited for at exit
    assert cds.java_options(JAVA, {}) == ""  # one recording at a time: the next run runs without
    assert cds.java_options(JAVA, {"spark.jars": "/d.jar"}).startswith("-XX:ArchiveClassesAtExit=")  # another archive
    archive.write_bytes(b"x")
    assert cds.java_options(JAVA, {}) == f"-XX:SharedArchiveFile={archive} -Xshare:auto {cds.QUIET}"


def test_map_only_maps_an_archive_there_and_never_records_one(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ETLSTAGE_SPARK_CDS", "map")
    assert cds.java_options(JAVA, {}) == ""
    assert recorded_at_exit == [] and not list(cache.glob("*.recording")), "map-only claimed a recording"
    archive = cache / f"{cds.archive_key(JAVA, {})}.jsa"
    archive.write_bytes(b"x")
    assert cds.java_options(JAVA, {}) == f"-XX:SharedArchiveFile={archive} -Xshare:auto {cds.QUIET}"


def test_another_class_path_or_java_is_another_archive() -> None:
    base = cds.archive_key(JAVA, {})
    assert cds.archive_key(JAVA, {"spark.jars": "/c/delta.jar"}) != base
    assert cds.archive_key(JAVA, {"spark.driver.extraClassPath": "/x"}) != base
    assert cds.archive_key("/opt/jdk21/bin/java (openjdk version 21)", {}) != base
    assert cds.archive_key(JAVA, {"spark.executor.memory": "2g"}) == base  # not the driver's classes


def test_the_same_pyspark_installed_elsewhere_is_another_archive(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two virtual environments with the same pyspark: an archive names its jars' paths, so
    the other's JVM would map nothing from it, run after run."""
    import pyspark

    base = cds.archive_key(JAVA, {})
    monkeypatch.setattr(pyspark, "__file__", "/elsewhere/venv/lib/python3.11/site-packages/pyspark/__init__.py")
    assert cds.archive_key(JAVA, {}) != base


def test_off_by_setting_by_the_users_own_sharing_options_and_in_a_folder_others_can_write(
    cache: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    assert cds.java_options(JAVA, {cds.OPTIONS_KEY: "-Xshare:off"}) == ""
    assert cds.java_options(JAVA, {cds.OPTIONS_KEY: "-XX:SharedArchiveFile=/mine.jsa"}) == ""
    monkeypatch.setenv("ETLSTAGE_SPARK_CDS", "off")
    assert cds.java_options(JAVA, {}) == ""
    monkeypatch.delenv("ETLSTAGE_SPARK_CDS")
    cache.mkdir(mode=0o700)
    cache.chmod(0o711)  # others may pass through, not write: fine
    assert cds.java_options(JAVA, {}).startswith("-XX:ArchiveClassesAtExit=")
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


def _stand_in_jvm(part: Path, *, seconds: float, says_written: bool, code: int = 0) -> subprocess.Popen[bytes]:
    """A JVM as pyspark's behaves when recording: it opens its log as it starts, ends when
    its stdin does, then spends ``seconds`` writing its archive and logs that it is written
    (or is killed before)."""
    line = f"echo '[9.1s][info][cds,dynamic] {cds.WRITTEN.decode()} 0x8 - 0x9 [984 bytes header, 9 bytes total]'"
    script = f": > {part}.log; cat >/dev/null; printf half > {part}; sleep {seconds}; printf archive >> {part}; "
    script += f"{line} >> {part}.log; " if says_written else ""
    return subprocess.Popen(["sh", "-c", script + f"exit {code}"], stdin=subprocess.PIPE)


@pytest.mark.parametrize(("says_written", "code"), [(True, 0), (True, 1), (False, 0)])
def test_a_recorded_archive_is_taken_into_use_only_once_its_jvm_says_it_is_written(
    cache: Path, monkeypatch: pytest.MonkeyPatch, says_written: bool, code: int
) -> None:
    from pyspark import SparkContext

    cache.mkdir(mode=0o700)
    part, archive = cache / "k.abc.part", cache / "k.jsa"
    jvm = _stand_in_jvm(part, seconds=0.3, says_written=says_written, code=code)
    monkeypatch.setattr(SparkContext, "_gateway", SimpleNamespace(proc=jvm))
    cds._take_into_use(part, archive, os.getpid())
    assert jvm.returncode == code  # it was waited for
    assert archive.exists() == says_written  # the log's word, not the exit status, says it is whole
    assert part.exists() == (not says_written)  # a partial one stays until it is abandoned
    if says_written:
        assert archive.read_bytes() == b"halfarchive"


def test_a_worker_given_too_little_time_to_exit_maps_an_archive_but_records_none(
    cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Once a worker exits, its engine kills what it started, a JVM still writing its
    archive among them: with less than RECORD_GRACE to exit (the default stop_timeout)
    recording would only cost the run its end and keep others from recording."""
    monkeypatch.setenv("ETLSTAGE_TYPE", "L")  # a worker, as the stock Spark loader is
    for grace in ("10", "", str(cds.RECORD_GRACE - 1), "nan", "inf", "-60", "sixty"):  # unsaid or odd: the default
        monkeypatch.setenv("ETLSTAGE_STOP_TIMEOUT", grace)
        assert cds.java_options(JAVA, {}) == ""
        assert not cache.exists() or not list(cache.iterdir())  # no claim, no part
    archive = cache / f"{cds.archive_key(JAVA, {})}.jsa"
    archive.write_bytes(b"x")
    assert cds.java_options(JAVA, {}) == f"-XX:SharedArchiveFile={archive} -Xshare:auto {cds.QUIET}"


def test_a_worker_given_time_enough_records_and_waits_for_its_jvm_within_that_time(
    cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pyspark import SparkContext

    monkeypatch.setenv("ETLSTAGE_TYPE", "L")
    monkeypatch.setenv("ETLSTAGE_STOP_TIMEOUT", f"{cds.RECORD_GRACE:g}")
    assert cds.exit_wait() == cds.RECORD_GRACE - cds.EXIT_MARGIN  # its own exit fits in what is left
    monkeypatch.setenv("ETLSTAGE_STOP_TIMEOUT", "3600")
    assert cds.exit_wait() == cds.EXIT_WAIT
    part = _recording(cds.java_options(JAVA, {}))
    key = cds.archive_key(JAVA, {})
    jvm = _stand_in_jvm(part, seconds=2.0, says_written=True)
    monkeypatch.setattr(SparkContext, "_gateway", SimpleNamespace(proc=jvm))
    cds._take_into_use(part, cache / f"{key}.jsa", os.getpid())
    assert jvm.returncode == 0  # waited for
    assert sorted(p.name for p in cache.iterdir()) == [f"{key}.jsa"]  # in use before the worker exits


def test_a_process_of_its_own_waits_for_its_jvm_to_write_the_archive(
    cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The Spark engine's driver is no worker: nothing stops it at exit, and a run in a
    container that ends with it would otherwise never leave an archive."""
    from pyspark import SparkContext

    monkeypatch.delenv("ETLSTAGE_TYPE", raising=False)
    options = cds.java_options(JAVA, {})
    part = _recording(options)
    key = cds.archive_key(JAVA, {})
    jvm = _stand_in_jvm(part, seconds=2.0, says_written=True)
    monkeypatch.setattr(SparkContext, "_gateway", SimpleNamespace(proc=jvm))
    cds._take_into_use(part, cache / f"{key}.jsa", os.getpid())
    assert jvm.returncode == 0
    assert sorted(p.name for p in cache.iterdir()) == [f"{key}.jsa"]  # in use before the process ends


def test_a_claim_to_record_left_by_a_run_that_died_lapses(cache: Path) -> None:
    cds.java_options(JAVA, {})
    claim = cache / f"{cds.archive_key(JAVA, {})}.recording"
    assert claim.exists() and cds.java_options(JAVA, {}) == ""
    old = time.time() - cds.RECORDING - 60
    os.utime(claim, (old, old))
    assert cds.java_options(JAVA, {}).startswith("-XX:ArchiveClassesAtExit=")


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
    old_log, new_log = cache / "b.1.part.log", cache / "b.2.part.log"
    for p, age in ((old_part, cds.ABANDONED + 60), (new_part, 5), (old_log, cds.ABANDONED + 60), (new_log, 5)):
        p.write_bytes(b"x")
        os.utime(p, (now - age, now - age))
    cds._clean_up(cache)
    assert sorted(p.name for p in cache.glob("*.jsa")) == [f"a{i}.jsa" for i in range(cds.KEEP)]
    assert not old_part.exists() and new_part.exists()  # one a JVM may be writing right now stays
    assert not old_log.exists() and new_log.exists()


SESSION = """
import json
from etlstage.spark.setup.spark_session import start_session
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
    recording = [a.split("=")[0] for a in run()]
    assert recording == ["-XX:ArchiveClassesAtExit", *(q.split("=")[0] for q in quiet), "-Xlog:cds+dynamic"]
    folder = tmp_path / "cds"
    deadline = time.monotonic() + 120  # a slow machine's JVM may still be writing as the run ends
    while not list(folder.glob("*.jsa")) and time.monotonic() < deadline:
        if any(cds.WRITTEN in log.read_bytes() for log in folder.glob("*.part.log")):
            break
        time.sleep(0.5)
    second = run()  # takes the archive into use if the first run could not
    archives = list(folder.iterdir())
    assert [p.suffix for p in archives] == [".jsa"], archives  # no part, log nor claim left
    assert second == [f"-XX:SharedArchiveFile={archives[0]}", "-Xshare:auto", *quiet]


@pytest.mark.slow
def test_a_real_jvm_logs_the_line_that_takes_its_archive_into_use(cache: Path) -> None:
    options = cds.java_options(JAVA, {})
    done = subprocess.run(["java", *options.split(), "-version"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "cds" not in done.stdout  # the worker's stdout is the protocol
    key = cds.archive_key(JAVA, {})
    assert cds.java_options(JAVA, {}) == f"-XX:SharedArchiveFile={cache}/{key}.jsa -Xshare:auto {cds.QUIET}"
    mapped = subprocess.run(["java", f"-XX:SharedArchiveFile={cache}/{key}.jsa", "-Xshare:on", "-version"],
                            capture_output=True, text=True, timeout=120)  # fmt: skip
    assert mapped.returncode == 0, mapped.stderr  # -Xshare:on: a bad archive would be an error


def test_a_run_keeps_the_archive_it_maps_and_clears_out_the_rest(cache: Path) -> None:
    """Each start refreshes its archive's time (the clean-up keeps the most recently used)
    and clears out archives beyond KEEP and parts left an hour ago."""
    cache.mkdir(mode=0o700)
    day_ago = time.time() - 86400
    mine = cache / f"{cds.archive_key(JAVA, {})}.jsa"
    others = [cache / f"other{i}.jsa" for i in range(cds.KEEP + 1)]
    abandoned = cache / "other.x.part"
    for i, p in enumerate([mine, *others, abandoned]):
        p.write_bytes(b"x")
        os.utime(p, (day_ago - i, day_ago - i))
    assert cds.java_options(JAVA, {}).startswith(f"-XX:SharedArchiveFile={mine} ")
    assert time.time() - mine.stat().st_mtime < 60  # used now: the last one the clean-up drops
    left = sorted(p.name for p in cache.glob("*.jsa"))
    assert len(left) == cds.KEEP and mine.name in left
    assert not abandoned.exists()
    cds.java_options(JAVA, {})
    assert mine.exists()  # the next clean-up keeps it too


@pytest.mark.parametrize("part_is", ["empty", "a symlink", "missing"])
def test_only_a_whole_file_is_taken_into_use_whatever_its_log_says(cache: Path, part_is: str) -> None:
    first = cds.java_options(JAVA, {})
    part = _recording(first)
    (cache / f"{part.name}.log").write_bytes(cds.WRITTEN + b" 0x8 - 0x9\n")
    if part_is == "empty":
        part.write_bytes(b"")
    elif part_is == "a symlink":
        (cache / "elsewhere").write_bytes(b"not an archive of ours")
        part.symlink_to(cache / "elsewhere")
    again = cds.java_options(JAVA, {})
    assert not list(cache.glob("*.jsa"))
    assert again.startswith("-XX:ArchiveClassesAtExit=")  # its log and claim gone: recorded anew
