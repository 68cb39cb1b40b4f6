"""The Spark loader's parts that need no JVM: config, parsing, routing, key index, publish, start-up checks."""

from __future__ import annotations

import os
import socket
import subprocess

import pytest
from etlstage_workers.spark import rdss as routes
from etlstage_workers.spark.config import LoaderConfig, parse_column
from etlstage_workers.spark.extract import RAW, TABLE, BadMessage, content_key, key_of, prepare
from etlstage_workers.spark.keystore import COMMITTED, KeyIndexTooNew, KeyStore
from etlstage_workers.spark.publish import publish, published_path
from etlstage_workers.spark.session import SparkStartError, check_java, check_master_reachable

from etlstage.errors import ConfigError
from tests.support.spark_msgs import PY, WRAPPED_NOT_JSON, env_for, rdss


def test_column_specs_and_pointers() -> None:
    assert parse_column("id=/a/b") == parse_column("id:string=/a/b")
    assert parse_column("n:long=/a~1b").tokens == ("a/b",)
    for bad in ["id", "id=a/b", "1x=/a", "id:int=/a", "id="]:
        with pytest.raises(ValueError, match="column"):
            parse_column(bad)
    message = b'{"a": {"b": [1]}}'
    assert key_of({"a": {"b": "k"}}, ("a", "b"), message) == "k"
    assert key_of({"a": {"b": {"y": 1, "x": 2}}}, ("a", "b"), message) == '{"x":2,"y":1}'
    # Array elements are not addressed (the column schema's rule); null and missing fall back
    assert key_of({"a": {"b": [1]}}, ("a", "b", "0"), message) == content_key(message)
    assert key_of({"a": {"b": None}}, ("a", "b"), message) == content_key(message)


def test_config_reports_every_problem_at_once() -> None:
    with pytest.raises(ConfigError) as err:
        LoaderConfig(
            output="out", format="avro", partition_by=("nope",), master="mesos-ish", columns=(parse_column("a=/a"),)
        ).check()
    text = str(err.value)
    assert "avro" in text and "'nope'" in text and "mesos-ish" in text and "3 problems" in text
    with pytest.raises(ConfigError, match="reaches inside"):
        LoaderConfig(output="o", columns=(parse_column("a=/a"), parse_column("b=/a/b"))).check()
    LoaderConfig(output="o", rdss=True, partition_by=("messageType",), master="spark://h:7077").check()


def test_routing_table_matches_the_transformer_contract() -> None:
    for code in ["GENERR001", "GENERR002", "GENERR003", "GENERR004", "GENERR007", "GENERR010"]:
        assert routes.route_of(code) == "invalid"
    for code in ["GENERR005", "GENERR006", "GENERR008", "GENERR009", "GENERR999", "", 7]:
        assert routes.route_of(code) == "error"
    assert routes.route_of(None) == "valid"


JSON_CONFIG = LoaderConfig(
    output="o",
    columns=(parse_column("id=/h/id"), parse_column("n:long=/n"), parse_column("x:double=/x"), parse_column("t=/t")),
    key="/h/id",
).check()


def test_json_fast_path_types_columns_and_keys() -> None:
    msgs = [b'{"h":{"id":"a"},"n":1,"x":2,"t":"s"}', b'{"h":{},"n":null}']
    prepared = prepare(msgs, JSON_CONFIG)
    assert prepared.parsed
    assert prepared.table.to_pylist() == [
        {"id": "a", "n": 1, "x": 2.0, "t": "s"},
        {"id": None, "n": None, "x": None, "t": None},
    ]
    assert prepared.keys == ["a", content_key(msgs[1])]  # no key: the content is the key


def test_keys_are_the_same_text_on_both_paths() -> None:
    config = LoaderConfig(output="o", columns=(parse_column("id:double=/id"),), key="/id").check()
    fast = prepare([b'{"id":1}', b'{"id":2.5}'], config)
    slow = prepare([b'{"id":1}', b'{"id":2.5}', b'{"id":"x"}'], config)
    assert fast.parsed and not slow.parsed
    assert fast.keys == slow.keys[:2] == ["1", "2.5"]


def test_json_slow_path_when_types_differ_or_lines_split() -> None:
    msgs = [b'{"h":{"id":7},"t":{"deep":[1]}}', b'{"h":\n{"id":"b"}}']
    prepared = prepare(msgs, JSON_CONFIG)
    assert not prepared.parsed and prepared.table.column_names == [RAW]
    assert prepared.keys == ["7", "b"]
    with pytest.raises(BadMessage, match="message 1 of the batch is not valid JSON"):
        prepare([b'{"h":{"id":"b"}}\n{"h":{"id":"c"}}'], JSON_CONFIG)  # two objects in one message
    with pytest.raises(BadMessage, match="message 2 of the batch is not valid JSON"):
        prepare([b'{"h":{"id":"a"}}', b"{oops"], JSON_CONFIG)
    with pytest.raises(BadMessage, match="not a JSON object"):
        prepare([b"[1,2]"], JSON_CONFIG)


def test_rdss_prepare_routes_and_keeps_bad_payloads() -> None:
    config = LoaderConfig(output="o", rdss=True).check()
    msgs = [rdss(1), rdss(2, "GENERR001"), rdss(3, "GENERR006"), WRAPPED_NOT_JSON, b"<xml/>", b'"text"', b"\xff\xfe"]
    prepared = prepare(msgs, config)
    assert prepared.parsed
    assert prepared.routes == ["valid", "invalid", "error", "invalid", "error", "error", "error"]
    assert prepared.keys[:3] == [f"00000000-0000-4000-8000-{i:012d}" for i in (1, 2, 3)]
    assert prepared.keys[3:] == [content_key(m) for m in msgs[3:]]
    rows = prepared.table.to_pylist()
    assert rows[0]["messageType"] == "MetadataCreate" and rows[0]["position"] == 1 and rows[0]["sequence"] == "seq-1"
    assert rows[0]["body"] == '{"objectUuid":"o-1","n":1}' and rows[0]["raw"] == msgs[0].decode()
    assert rows[0]["publishedTimestamp"] == "2024-05-01T12:00:00Z" and rows[0]["errorCode"] is None
    assert rows[3]["errorCode"] == "GENERR007" and rows[3]["body"] is None
    for row in rows[4:]:
        assert row["errorCode"] == "GENERR007" and row["errorDescription"] and row["messageId"] is None
    assert rows[6]["raw"] == "\\xff\\xfe"
    assert prepared.table.column(TABLE).to_pylist() == prepared.routes
    odd = prepare(
        [b'{"messageHeader":{"messageId":7,"errorCode":5,"messageSequence":{"position":"1"}},"n":1e999}'], config
    )
    assert odd.keys == ["7"] and odd.routes == ["error"]
    assert odd.table.to_pylist()[0]["errorCode"] == "5" and odd.table.to_pylist()[0]["position"] is None


def test_key_index_claims_duplicates_and_in_flight_batches(tmp_path) -> None:
    store = KeyStore(str(tmp_path / "k.sqlite"))
    other = KeyStore(str(tmp_path / "k.sqlite"))  # a second instance on the same file
    assert store.claim("i0-a", 0, ["k1", "k2"]) == {}
    assert other.claim("i1-b", 1, ["k2", "k3"]) == {"k2": ("i0-a", "claimed")}
    store.mark_staged("i0-a", {"total": 2, "valid": 2}, 0)
    store.mark_committed("i0-a")
    assert other.reclaim("i1-b", ["k2"]) == {"k2": ("i0-a", COMMITTED)}
    other.release("i1-b")
    assert store.claim("i0-c", 0, ["k3"]) == {}  # released keys are free again
    assert store.unfinished(0) == [("i0-c", "claimed")]
    store.finish_empty("i0-d", 5)
    assert store.stats() == {"batches": 2, "duplicates": 5, "rows.total": 2, "rows.valid": 2}


def test_a_format_1_key_index_is_converted_with_its_keys_and_batches(tmp_path) -> None:
    import sqlite3

    path = str(tmp_path / "old.sqlite")
    db = sqlite3.connect(path)
    db.executescript(
        """
        CREATE TABLE batches(batch TEXT PRIMARY KEY, instance INTEGER NOT NULL, state TEXT NOT NULL,
            created REAL NOT NULL, counts TEXT NOT NULL DEFAULT '{}', duplicates INTEGER NOT NULL DEFAULT 0);
        CREATE TABLE keys(key TEXT PRIMARY KEY, batch TEXT NOT NULL) WITHOUT ROWID;
        CREATE TABLE stats(name TEXT PRIMARY KEY, value INTEGER NOT NULL);
        INSERT INTO batches VALUES ('i0-old', 0, 'committed', 1, '{"total": 2}', 0), ('i0-open', 0, 'staged', 2, '{}', 0);
        INSERT INTO keys VALUES ('k1', 'i0-old'), ('k2', 'i0-old'), ('k3', 'i0-open'), ('orphan', 'i0-gone');
        INSERT INTO stats VALUES ('batches', 1);
        """
    )
    db.commit()
    db.close()
    store = KeyStore(path)
    assert store.claim("i0-new", 0, ["k1", "k3", "orphan", "k4"]) == {
        "k1": ("i0-old", COMMITTED),
        "k3": ("i0-open", "staged"),
    }  # "orphan" belonged to a released batch: the conversion dropped it, so it was free
    assert store.unfinished(0) == [("i0-open", "staged"), ("i0-new", "claimed")]
    assert store.stats() == {"batches": 1}
    assert store.db.execute("PRAGMA user_version").fetchone()[0] == 2
    store.db.execute("PRAGMA user_version = 3")  # as a newer loader would leave it
    store.close()
    with pytest.raises(KeyIndexTooNew, match="format 3 is newer"):
        KeyStore(path)


def test_publish_moves_staged_files_and_finishes_after_a_partial_run(tmp_path) -> None:
    out = tmp_path / "ds"
    staged = out / "_staging" / "i0-b" / "out" / "__table=valid" / "messageType=X"
    staged.mkdir(parents=True)
    for name in ["part-00000-u.c000.snappy.parquet", "part-00001-u.c000.snappy.parquet", ".part-00000.crc"]:
        (staged / name).write_bytes(b"data")
    first = published_path(
        str(out), "i0-b", os.path.join("__table=valid", "messageType=X"), "part-00000-u.c000.snappy.parquet"
    )
    assert first == str(out / "valid" / "messageType=X" / "part-i0-b-00000-u.c000.snappy.parquet")
    os.makedirs(os.path.dirname(first))
    os.replace(staged / "part-00000-u.c000.snappy.parquet", first)  # a publish cut short after one file
    assert publish(str(out), "i0-b") == 1
    assert sorted(os.listdir(out / "valid" / "messageType=X")) == [
        "part-i0-b-00000-u.c000.snappy.parquet",
        "part-i0-b-00001-u.c000.snappy.parquet",
    ]
    assert publish(str(out), "i0-b") == 0


def test_start_up_checks_name_cause_and_fix(tmp_path, monkeypatch) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens there once closed
    with pytest.raises(SparkStartError, match=rf"cannot reach the Spark master spark://127.0.0.1:{port}.*fix --master"):
        check_master_reachable(f"spark://127.0.0.1:{port}", 2)
    monkeypatch.setenv("JAVA_HOME", str(tmp_path))
    with pytest.raises(SparkStartError, match="has no executable bin/java"):
        check_java()
    monkeypatch.delenv("JAVA_HOME")
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(SparkStartError, match="`java` is not on PATH.*openjdk"):
        check_java()


def test_the_java_version_named_is_not_the_options_the_jvm_picked_up(monkeypatch) -> None:
    """A JVM repeats JAVA_TOOL_OPTIONS and JDK_JAVA_OPTIONS before its version; the version
    is what start-up logs and what class data sharing keys its archive on."""
    monkeypatch.setenv("JAVA_TOOL_OPTIONS", "-Dx=1")
    monkeypatch.setenv("JDK_JAVA_OPTIONS", "-Dy=2")
    named = check_java()
    assert "Picked up" not in named and "version" in named, named


def _run_cli(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [PY, "-m", "etlstage_workers.spark", *args], input=b"", capture_output=True, env=env, timeout=60, check=False
    )


def test_cli_refuses_to_start_before_taking_any_message(tmp_path) -> None:
    env = env_for(str(tmp_path / "state"))
    done = _run_cli(["--output", str(tmp_path / "o")], env)
    assert done.returncode == 2 and b"--columns: give at least one" in done.stderr
    no_java = {**env, "PATH": str(tmp_path)}
    no_java.pop("JAVA_HOME", None)
    done = _run_cli(["--output", str(tmp_path / "o"), "--rdss"], no_java)
    assert done.returncode == 2 and b"`java` is not on PATH" in done.stderr
    assert done.stdout == b""  # nothing on the protocol stream
    done = _run_cli(["--output", str(tmp_path / "o"), "--rdss", "--master", "spark://127.0.0.1:9"], env)
    assert done.returncode == 2 and b"cannot reach the Spark master spark://127.0.0.1:9" in done.stderr
