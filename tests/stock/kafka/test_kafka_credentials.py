"""Kafka credentials off the command line: ``--config-file`` and ``ETLSTAGE_KAFKA_CONFIG_*``
reach librdkafka as ``--config`` does, and a secret is never in the worker's argv or an error."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from etlstage_workers.kafka.options import (
    OWN_CONSUMER,
    build_load_parser,
    build_parser,
    load_options_from_args,
    options_from_args,
)
from etlstage_workers.kafka.spark_sink import load_options_from
from etlstage_workers.kafka.spark_source import options_from

from etlstage.config.model import StageConfig
from etlstage.errors import ConfigError
from etlstage.native import NativeContext
from etlstage.protocol.markers import Markers

PROPS = """\
# the cluster's client settings
security.protocol = SASL_SSL
sasl.mechanism=PLAIN
! a Java-properties comment
sasl.username=bob
sasl.password=fromFILE=with=equals

fetch.wait.max.ms=100
"""


def test_a_config_file_the_environment_and_config_merge_the_command_line_winning(tmp_path: Path) -> None:
    (tmp_path / "kafka.properties").write_text(PROPS)
    ns = build_parser().parse_args(
        ["--bootstrap", "h:9", "--topic", "t", "--config-file", "kafka.properties", "--config", "fetch.wait.max.ms=5"]
    )
    env = {"ETLSTAGE_KAFKA_CONFIG_SASL_PASSWORD": "fromENV", "ETLSTAGE_KAFKA_CONFIG_SASL_USERNAME": "alice"}
    o = options_from_args(ns, env, str(tmp_path))
    assert o.client_config(OWN_CONSUMER, "etlstage-kafka") == {
        "bootstrap.servers": "h:9",
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "PLAIN",
        "sasl.username": "alice",
        "sasl.password": "fromENV",
        "fetch.wait.max.ms": "5",
    }
    # the file alone: its password as written, '=' and all
    alone = options_from_args(ns, {}, str(tmp_path))
    assert alone.config["sasl.password"] == "fromFILE=with=equals"
    # the file named by the environment, for the loader too
    lns = build_load_parser().parse_args(["--bootstrap", "h:9", "--topic", "t"])
    lo = load_options_from_args(lns, {"ETLSTAGE_KAFKA_CONFIG_FILE": str(tmp_path / "kafka.properties")})
    assert lo.config["sasl.username"] == "bob"


def test_a_bad_line_or_file_names_its_place_never_its_text(tmp_path: Path) -> None:
    (tmp_path / "bad.properties").write_text("sasl.username=bob\nsasl.password secretNoEquals\n")
    ns = build_parser().parse_args(["--bootstrap", "h:9", "--topic", "t", "--config-file", "bad.properties"])
    with pytest.raises(ConfigError) as err:
        options_from_args(ns, {}, str(tmp_path))
    assert f"--config-file {tmp_path / 'bad.properties'}:2: expected KEY=VALUE" in str(err.value)
    assert "secretNoEquals" not in str(err.value)
    ns = build_parser().parse_args(["--bootstrap", "h:9", "--topic", "t", "--config-file", "missing.properties"])
    with pytest.raises(ConfigError, match="missing.properties: cannot be read"):
        options_from_args(ns, {}, str(tmp_path))


def test_a_property_the_worker_sets_itself_is_refused_naming_where_it_was_given(tmp_path: Path) -> None:
    (tmp_path / "k.properties").write_text("group.id=other\n")
    ns = build_parser().parse_args(["--bootstrap", "h:9", "--topic", "t", "--config-file", "k.properties"])
    with pytest.raises(ConfigError) as err:
        options_from_args(ns, {"ETLSTAGE_KAFKA_CONFIG_ENABLE_AUTO_COMMIT": "true"}, str(tmp_path))
    text = str(err.value)
    assert f"--config-file {tmp_path / 'k.properties'}:1: group.id=...: etlstage-kafka sets group.id itself" in text
    assert "$ETLSTAGE_KAFKA_CONFIG_ENABLE_AUTO_COMMIT: enable.auto.commit=...: etlstage-kafka sets" in text


def _ctx(name: str, type_: str, argv: list[str], cwd: str, **env: str) -> NativeContext:
    stage = StageConfig(name=name, type=type_, command=[name, *argv], markers=Markers(), mode="cyclic")
    return NativeContext(stage=stage, argv=argv, checkpoint="/nowhere", env=env, state_dir="/s/d/stages/x", cwd=cwd)


def test_native_stages_read_the_stage_environment_and_folder(tmp_path: Path) -> None:
    (tmp_path / "k.properties").write_text("sasl.username=bob\n")
    argv = ["--bootstrap", "h:9", "--topic", "t", "--config-file", "k.properties"]
    env = {"ETLSTAGE_KAFKA_CONFIG_SASL_PASSWORD": "pw"}
    sink = load_options_from(_ctx("etlstage-kafka-load", "L", argv, str(tmp_path), **env))
    assert (sink.config["sasl.username"], sink.config["sasl.password"]) == ("bob", "pw")
    # Spark's Java Kafka source takes no librdkafka property: refused, naming where each came from
    with pytest.raises(ConfigError) as err:
        options_from(_ctx("etlstage-kafka", "E", argv, str(tmp_path), **env))
    assert "$ETLSTAGE_KAFKA_CONFIG_SASL_PASSWORD: sasl.password" in str(err.value)
    assert "pw" not in str(err.value).replace("properties", "")


def test_the_worker_hands_the_files_and_environments_properties_to_librdkafka(tmp_path: Path) -> None:
    """A property librdkafka does not know, from either place, fails the worker at start:
    it got there.  The values are not in the worker's command line."""
    (tmp_path / "k.properties").write_text("no.such.property.from.file=1\n")
    for extra, env, word in (
        (["--config-file", "k.properties"], {}, "no.such.property.from.file"),
        ([], {"ETLSTAGE_KAFKA_CONFIG_NO_SUCH_PROPERTY_FROM_ENV": "1"}, "no.such.property.from.env"),
    ):
        r = subprocess.run(
            [sys.executable, "-m", "etlstage_workers.kafka", "--bootstrap", "127.0.0.1:1", "--topic", "t", *extra],
            input=b"",
            capture_output=True,
            cwd=tmp_path,
            env={"PATH": "/usr/bin:/bin", "ETLSTAGE_TYPE": "E", "ETLSTAGE_MODE": "cyclic", **env},
            timeout=60,
        )
        assert r.returncode != 0 and word in r.stderr.decode(), r.stderr.decode()[-2000:]
