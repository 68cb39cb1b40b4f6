"""The Maven jar cache: fetched once, complete or not at all, pyspark's own jars left out."""

from __future__ import annotations

from pathlib import Path

import pytest

from etlstage.spark import jars


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
