"""The Maven jar cache: fetched once, complete or not at all, pyspark's own jars left out."""

from __future__ import annotations

import logging
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from etlstage.spark.setup import jars


def test_artifact_names_drop_the_version() -> None:
    assert jars.artifact_of("bundle-2.35.4.jar") == "bundle"
    assert jars.artifact_of("delta-spark_4.2_2.13-4.4.0.jar") == "delta-spark_4.2_2.13"
    assert jars.artifact_of("wildfly-openssl-2.2.5.Final.jar") == "wildfly-openssl"


def test_a_bad_coordinate_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ETLSTAGE_JAR_CACHE", str(tmp_path))
    with pytest.raises(jars.JarFetchError, match="'junit:junit': expected group:artifact:version"):
        jars.fetch(["junit:junit"], beside_spark=False)


def test_an_unknown_package_set_is_named() -> None:
    with pytest.raises(jars.JarFetchError, match="package set 'nope': expected one of .*s3"):
        jars.fetch_named("nope")


def test_the_s3_connector_matches_pysparks_hadoop() -> None:
    (shipped,) = jars.spark_jars_dir().glob("hadoop-client-api-*.jar")
    assert jars.s3_connector() == [f"org.apache.hadoop:hadoop-aws:{shipped.name[18:-4]}"]


def test_fetched_once_then_served_from_the_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ETLSTAGE_JAR_CACHE", str(tmp_path))
    first = jars.fetch(["junit:junit:4.13.2"], beside_spark=False)
    assert sorted(p.name for p in first) == ["hamcrest-core-1.3.jar", "junit-4.13.2.jar"]
    monkeypatch.setenv("PATH", "")  # no mvn now: the cache must answer
    assert jars.fetch(["junit:junit:4.13.2"], beside_spark=False) == first


def test_a_half_written_set_is_fetched_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ETLSTAGE_JAR_CACHE", str(tmp_path))
    first = jars.fetch(["junit:junit:4.13.2"], beside_spark=False)
    first[0].unlink()  # a cache someone pruned
    again = jars.fetch(["junit:junit:4.13.2"], beside_spark=False)
    assert again == first and all(p.exists() for p in again)


def test_jars_pyspark_ships_are_left_out(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """commons-lang3 is in pyspark's jars folder: asked for beside Spark, it is not copied."""
    monkeypatch.setenv("ETLSTAGE_JAR_CACHE", str(tmp_path))
    assert list(jars.spark_jars_dir().glob("commons-lang3-*.jar"))
    assert jars.fetch(["org.apache.commons:commons-lang3:3.14.0"]) == []
    alone = jars.fetch(["org.apache.commons:commons-lang3:3.14.0"], beside_spark=False)
    assert [p.name for p in alone] == ["commons-lang3-3.14.0.jar"]


@contextmanager
def silent_server() -> Iterator[str]:
    """An HTTP address that accepts connections and never answers (a repository behind a
    firewall that drops, or a proxy that hangs)."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(16)
        yield f"http://127.0.0.1:{server.getsockname()[1]}/maven2"


def test_an_unreachable_repository_fails_in_seconds_saying_what_to_do(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ETLSTAGE_JAR_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.m2/settings.xml of the user's
    with silent_server() as url:
        monkeypatch.setenv("ETLSTAGE_MAVEN_REPOSITORY", url)
        began = time.monotonic()
        with pytest.raises(jars.JarFetchError) as raised:  # (not in Maven's local repository either)
            jars.fetch(["org.example.etlstage:not-fetched:1.0"], beside_spark=False)
        took = time.monotonic() - began
    said = str(raised.value)
    assert took < jars.PROBE_SECONDS + 3, took
    assert f"cannot reach the Maven repository {url}" in said and "org.example.etlstage:not-fetched:1.0" in said
    for remedy in ("<proxy> in ~/.m2/settings.xml", "spark.jars.packages", "--conf spark.jars=", "ETLSTAGE_JAR_CACHE"):
        assert remedy in said
    assert not list((tmp_path / "cache").rglob("*.jar"))


def test_a_refused_connection_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as s:  # a port nothing listens on (bound, never listening)
        s.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{s.getsockname()[1]}"
        assert "refused" in jars.probe(url).lower()


def test_each_downloaded_jar_is_a_progress_line(caplog: pytest.LogCaptureFixture) -> None:
    said = [
        "[INFO] Downloading from central: https://repo.maven.apache.org/maven2/io/delta/delta-spark_4.2_2.13/4.4.0/"
        "delta-spark_4.2_2.13-4.4.0.pom\n",
        "[INFO] Downloaded from central: https://repo.maven.apache.org/maven2/io/delta/delta-spark_4.2_2.13/4.4.0/"
        "delta-spark_4.2_2.13-4.4.0.pom (3.1 kB at 12 kB/s)\n",
        "[INFO] Downloaded from central: https://repo.maven.apache.org/maven2/io/delta/delta-spark_4.2_2.13/4.4.0/"
        "delta-spark_4.2_2.13-4.4.0.jar (6.8 MB at 2.1 MB/s)\n",
        "[INFO] Downloaded from central: https://repo.maven.apache.org/maven2/io/delta/delta-storage/4.4.0/"
        "delta-storage-4.4.0.jar (27 kB at 90 kB/s)\n",
    ]
    with caplog.at_level(logging.INFO, logger="etlstage.spark"):
        assert list(jars.progress(said)) == said  # Maven's output is kept (for an error's tail)
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2, lines
    assert lines[0].startswith("jars: delta-spark_4.2_2.13-4.4.0.jar (6.8 MB) from central [1 jars, 6.8 MB,")
    assert lines[1].startswith("jars: delta-storage-4.4.0.jar (27 kB) from central [2 jars, 6.8 MB,")


def test_jars_the_user_gives_are_not_fetched() -> None:
    delta = ["io.delta:delta-spark_4.2_2.13:4.4.0"]
    assert jars.given_by({"spark.jars.packages": "org.x:y:1, io.delta:delta-spark_4.2_2.13:4.3.0"}, delta)
    assert jars.given_by({"spark.jars": "/opt/jars/delta-spark_4.2_2.13-4.4.0.jar,/opt/jars/other-1.jar"}, delta)
    assert not jars.given_by({"spark.jars": "/opt/jars/delta-storage-4.4.0.jar"}, delta)
    assert not jars.given_by({}, delta)
    both = [*delta, "io.delta:delta-storage:4.4.0"]
    assert not jars.given_by({"spark.jars.packages": delta[0]}, both)
