"""The Delta side of the Spark loader without a JVM: options, the batch's tables and keys,
the session settings each engine starts with."""

from __future__ import annotations

from pathlib import Path

import pytest
from etlstage_workers.spark import lake
from etlstage_workers.spark.config import LoaderConfig
from etlstage_workers.spark.extract import prepare
from etlstage_workers.spark.loader import merge_conf

from etlstage.errors import ConfigError
from tests.support.spark_msgs import rdss


def test_a_uri_output_needs_the_delta_format() -> None:
    LoaderConfig(output="s3a://bucket/rdss", format="delta", rdss=True).check()
    with pytest.raises(ConfigError, match=r"s3a://bucket/rdss.*needs --format delta"):
        LoaderConfig(output="s3a://bucket/rdss", format="parquet", rdss=True).check()
    assert LoaderConfig(output="o", format="delta", rdss=True).is_table
    assert not LoaderConfig(output="o", rdss=True).is_table


def test_jar_sets_follow_the_format_and_the_file_system() -> None:
    assert lake.package_sets(LoaderConfig(output="o", format="delta", rdss=True)) == ["delta"]
    assert lake.package_sets(LoaderConfig(output="s3a://b/o", format="delta", rdss=True)) == ["delta", "s3"]
    assert lake.package_sets(LoaderConfig(output="o", rdss=True)) == []
    assert lake.session_conf(LoaderConfig(output="o", rdss=True)) == {}  # plain files: nothing to fetch


def test_rows_split_by_table_with_their_keys_first_occurrences_only() -> None:
    config = LoaderConfig(output="o", format="delta", rdss=True).check()
    messages = [rdss(1), rdss(2, "GENERR001"), rdss(1), rdss(3, "GENERR009")]
    prepared = prepare(messages, config)
    tables = lake.batch_tables(prepared, [0, 1, 3])  # the loader passes first occurrences
    assert sorted(tables) == ["error", "invalid", "valid"]
    assert tables["valid"].column(lake.KEY).to_pylist() == ["00000000-0000-4000-8000-000000000001"]
    assert tables["invalid"].column("messageId").to_pylist() == ["00000000-0000-4000-8000-000000000002"]
    assert "__table" not in tables["valid"].column_names
    assert lake.table_path("s3a://b/rdss/", "valid") == "s3a://b/rdss/valid"
    assert lake.table_path("/data/x", None) == "/data/x"


def test_the_users_conf_wins_and_jar_lists_are_joined() -> None:
    ours = {"spark.jars": "/c/delta.jar", "spark.sql.extensions": "x"}
    assert merge_conf(ours, {"spark.jars": "/u/mine.jar", "spark.sql.extensions": "y"}) == {
        "spark.jars": "/c/delta.jar,/u/mine.jar",
        "spark.sql.extensions": "y",
    }


def test_the_engine_starts_its_session_with_what_the_native_sink_needs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from etlstage.config.loader import load_config
    from etlstage.spark.driver.native import session_conf
    from etlstage.spark.tasks.plan import Plan

    monkeypatch.setattr(lake, "session_conf", lambda config: {"spark.jars": f"/j/{config.format}.jar"})
    (tmp_path / "stages.yaml").write_text(
        "stages:\n"
        "  - {name: src, type: E, command: [cat, in.txt]}\n"
        "  - {name: load, type: L, mode: batch, command: [etlstage-spark-load, --format, delta, --output, out,"
        " --rdss]}\n"
    )
    plan = Plan(load_config(tmp_path / "stages.yaml"), once=True)
    assert session_conf(plan) == {"spark.jars": "/j/delta.jar"}
