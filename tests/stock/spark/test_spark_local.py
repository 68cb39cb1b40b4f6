"""The loader in-process on one shared local SparkSession: formats, partitioning, RDSS tables, de-duplication."""

from __future__ import annotations

import io
import json
import os
import sqlite3

import pytest
from etlstage_workers.spark.config import LoaderConfig, parse_column
from etlstage_workers.spark.loader import SparkLoader

from etlstage.protocol.scenario import Scenario
from etlstage.worker import serve
from tests.support.spark_msgs import WRAPPED_NOT_JSON, rdss

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]  # a JVM


def run_loader(spark, config: LoaderConfig, batches: list[list[bytes]], state_dir: str) -> bytes:
    """The loader over the real protocol, supervisor-driven batches, in-memory streams."""
    stdin = io.BytesIO(b"".join(b"".join(m + b"\n" for m in batch) + b"\x17" for batch in batches))
    stdout = io.BytesIO()
    scenario = Scenario(type="L", mode="batch", batch_size=1000, stage="load", state_dir=state_dir)
    serve(SparkLoader(config, spark=spark), stdin=stdin, stdout=stdout, scenario=scenario)
    return stdout.getvalue()


def read(spark, fmt: str, path: str):
    reader = spark.read.format(fmt)
    if fmt == "csv":
        reader = reader.option("header", "true")
    return reader.load(path)


def events(n: int, start: int = 0) -> list[bytes]:
    return [
        json.dumps({"id": f"e{i}", "kind": "even" if i % 2 == 0 else "odd", "amount": i * 1.5, "tags": [i]}).encode()
        for i in range(start, start + n)
    ]


@pytest.mark.parametrize("fmt", ["parquet", "json", "orc", "csv"])
def test_every_format_with_partitioning(spark, tmp_path, fmt) -> None:
    columns = tuple(parse_column(c) for c in ["id=/id", "kind=/kind", "amount:double=/amount", "tags=/tags"])
    config = LoaderConfig(output=str(tmp_path / "out"), format=fmt, columns=columns, key="/id", partition_by=("kind",))
    # Batch 2 repeats two keys of batch 1: they are skipped, not written twice.
    acks = run_loader(spark, config.check(), [events(30), events(12, start=28)], str(tmp_path / "state"))
    assert acks == b"\x00\x00"
    assert {d for d in os.listdir(tmp_path / "out") if not d.startswith("_")} == {"kind=even", "kind=odd"}
    df = read(spark, fmt, str(tmp_path / "out"))
    rows = {r["id"]: r for r in df.collect()}
    assert len(rows) == df.count() == 40
    assert rows["e3"]["kind"] == "odd" and float(rows["e3"]["amount"]) == 4.5 and rows["e3"]["tags"] == "[3]"
    assert not os.listdir(tmp_path / "out" / "_staging")


def test_rdss_routes_into_three_tables(spark, tmp_path) -> None:
    config = LoaderConfig(output=str(tmp_path / "out"), rdss=True, partition_by=("messageType",)).check()
    valid = [rdss(i) for i in range(6)]
    invalid = [
        rdss(10 + i, code)
        for i, code in enumerate(["GENERR001", "GENERR002", "GENERR003", "GENERR004", "GENERR007", "GENERR010"])
    ]
    error = [rdss(20 + i, code) for i, code in enumerate(["GENERR005", "GENERR006", "GENERR008", "GENERR009", "X1"])]
    garbage = [b"<not json/>", b"[1,2,3]", b'"just a string"']
    batch1 = valid[:4] + invalid[:3] + error[:2] + [garbage[0], WRAPPED_NOT_JSON]
    batch2 = valid + invalid + error + garbage + [WRAPPED_NOT_JSON]  # replays batch 1 too
    state = tmp_path / "state"
    assert run_loader(spark, config, [batch1, batch2], str(state)) == b"\x00\x00"

    assert sorted(d for d in os.listdir(tmp_path / "out") if not d.startswith("_")) == ["error", "invalid", "valid"]
    tables = {t: spark.read.parquet(str(tmp_path / "out" / t)) for t in ("valid", "invalid", "error")}
    assert tables["valid"].count() == 6
    assert tables["invalid"].count() == 7  # six codes + the transformer's wrapped non-JSON payload
    assert tables["error"].count() == 5 + 3
    assert {r.errorCode for r in tables["invalid"].collect()} == {
        "GENERR001",
        "GENERR002",
        "GENERR003",
        "GENERR004",
        "GENERR007",
        "GENERR010",
    }
    one = tables["valid"].where("messageId = '00000000-0000-4000-8000-000000000003'").collect()[0]
    assert json.loads(one.body) == {"objectUuid": "o-3", "n": 3} and one.raw == rdss(3).decode()
    assert one.position == 3 and one.messageType == "MetadataCreate" and one.version == "3.0.2"
    assert one.publishedTimestamp == "2024-05-01T12:00:00Z" and one.sequence == "seq-1" and one.generator == "tests"
    bad = {r.raw: r for r in tables["error"].where("messageId IS NULL").collect()}
    assert set(bad) == {g.decode() for g in garbage}
    assert all(r.errorCode == "GENERR007" and r.errorDescription for r in bad.values())
    assert os.path.isdir(tmp_path / "out" / "valid" / "messageType=MetadataCreate")

    (db,) = [p for p in os.listdir(state) if p.endswith(".sqlite")]
    stats = dict(sqlite3.connect(state / db).execute("SELECT name, value FROM stats").fetchall())
    assert stats == {
        "batches": 2,
        "duplicates": 11,
        "rows.error": 8,
        "rows.invalid": 7,
        "rows.total": 21,
        "rows.valid": 6,
    }


def test_slow_path_equals_fast_path(spark, tmp_path) -> None:
    """A batch pyarrow cannot parse exactly goes through Spark's from_json: same columns, same values."""
    columns = tuple(parse_column(c) for c in ["id=/id", "n:long=/n", "doc=/doc"])
    config = LoaderConfig(output=str(tmp_path / "out"), columns=columns, key="/id").check()
    fast = [b'{"id":"a","n":1,"doc":"text"}', b'{"id":"b","n":2}']
    slow = [b'{"id":"c","n":3,"doc":{"x":[1,2]}}', b'{"id":"d", "n":4,\t"doc":"t"}']
    assert run_loader(spark, config, [fast, slow], str(tmp_path / "state")) == b"\x00\x00"
    rows = {r.id: (r.n, r.doc) for r in spark.read.parquet(str(tmp_path / "out")).collect()}
    assert rows == {"a": (1, "text"), "b": (2, None), "c": (3, '{"x":[1,2]}'), "d": (4, "t")}


def test_two_instances_share_the_key_index(spark, tmp_path) -> None:
    """Instances 0 and 1 on one output: distinct file names, one key index, overlapping input loaded once."""
    columns = tuple(parse_column(c) for c in ["id=/id", "kind=/kind"])
    config = LoaderConfig(output=str(tmp_path / "out"), columns=columns, key="/id").check()
    state = str(tmp_path / "state")
    loaders = []
    for instance in (0, 1):
        loader = SparkLoader(config, spark=spark)
        loader.scenario = Scenario(
            type="L", mode="batch", batch_size=100, instance=instance, instances=2, state_dir=state
        )
        loader.setup()
        loaders.append(loader)
    for loader, batch in [(0, events(20)), (1, events(20, start=10)), (0, events(5, start=25))]:
        pending = loaders[loader].load(batch)
        if pending is not None:  # None: every key was a duplicate, nothing to write
            pending.result()
    stats = loaders[1].store.stats()
    for loader in loaders:
        loader.teardown()
    names = [n for n in os.listdir(tmp_path / "out") if n.endswith(".parquet")]
    assert {n.split("-")[1] for n in names} == {"i0", "i1"}
    assert spark.read.parquet(str(tmp_path / "out")).count() == 30
    assert stats == {"batches": 3, "duplicates": 15, "rows.total": 30}


def test_worker_driven_batches(spark, tmp_path) -> None:
    """batch_driver: worker — BNC after each message short of the batch size, EOP after each load."""
    config = LoaderConfig(output=str(tmp_path / "out"), columns=(parse_column("id=/id"),), key="/id").check()
    scenario = Scenario(type="L", mode="batch", batch_size=3, batch_driver="worker", state_dir=str(tmp_path / "s"))
    stdin = io.BytesIO(b"".join(m + b"\n" for m in events(7)) + b"\x17")
    stdout = io.BytesIO()
    serve(SparkLoader(config, spark=spark), stdin=stdin, stdout=stdout, scenario=scenario)
    assert stdout.getvalue() == b"\x11\x11\x00\x11\x11\x00\x11\x00"
    assert sorted(r.id for r in spark.read.parquet(str(tmp_path / "out")).collect()) == [f"e{i}" for i in range(7)]


class TimedLoader(SparkLoader):
    """Records when each batch reaches ``load`` and when its write finishes; may fail one write."""

    def __init__(self, *args, fail_write: int | None = None, **kw) -> None:
        super().__init__(*args, **kw)
        self.events: list[tuple[str, int]] = []
        self.fail_write = fail_write
        self.writes = 0

    def load(self, messages):
        self.events.append(("load", int(json.loads(messages[0])["id"][1:])))
        return super().load(messages)

    def _run_spark(self, batch, prepared, positions, clock):
        self.writes += 1
        if self.writes == self.fail_write:
            raise OSError("disk full (injected)")
        counts = super()._run_spark(batch, prepared, positions, clock)
        self.events.append(("written", int(prepared.keys[positions[0]][1:])))
        return counts


def serve_file(loader: SparkLoader, batches: list[list[bytes]], tmp_path, state_dir: str) -> bytes:
    """Batches on an unbuffered file as stdin (as a pipe would be): the SDK reads ahead."""
    path = tmp_path / "stdin"
    path.write_bytes(b"".join(b"".join(m + b"\n" for m in batch) + b"\x17" for batch in batches))
    stdout = io.BytesIO()
    scenario = Scenario(type="L", mode="batch", batch_size=1000, stage="load", state_dir=state_dir)
    with open(path, "rb", buffering=0) as stdin:
        serve(loader, stdin=stdin, stdout=stdout, scenario=scenario)
    return stdout.getvalue()


def test_next_batch_is_prepared_while_spark_writes_and_overlapping_keys_load_once(spark, tmp_path) -> None:
    """Batch N+1 claims keys batch N still holds: it waits for N's commit and skips them."""
    config = LoaderConfig(output=str(tmp_path / "out"), columns=(parse_column("id=/id"),), key="/id").check()
    loader = TimedLoader(config, spark=spark)
    batches = [events(300), events(300, start=200), events(300, start=400)]
    acks = serve_file(loader, batches, tmp_path, str(tmp_path / "state"))
    assert acks == b"\x00\x00\x00"
    assert loader.events.index(("load", 200)) < loader.events.index(("written", 0)), loader.events
    ids = [r["id"] for r in spark.read.parquet(str(tmp_path / "out")).collect()]
    assert len(ids) == len(set(ids)) == 700
    said = loader.report()
    assert said.pop("output").startswith("Delta tables under ")  # where the data went, for the run's end
    assert said == {"messages": 900, "rows": {"total": 700}, "duplicates skipped": 200}


def test_a_failed_background_write_leaves_its_batch_unacknowledged_and_its_keys_free(spark, tmp_path) -> None:
    config = LoaderConfig(output=str(tmp_path / "out"), columns=(parse_column("id=/id"),), key="/id").check()
    state = str(tmp_path / "state")
    batches = [events(100), events(100, start=100), events(100, start=200)]
    with pytest.raises(OSError, match="injected"):
        serve_file(TimedLoader(config, spark=spark, fail_write=2), batches, tmp_path, state)
    assert spark.read.parquet(str(tmp_path / "out")).count() == 100  # batch 1 only
    (index,) = [n for n in os.listdir(state) if n.endswith(".sqlite")]
    store = sqlite3.connect(os.path.join(state, index))
    assert store.execute("SELECT state, COUNT(*) FROM batches GROUP BY state").fetchall() == [("committed", 1)]
    assert store.execute("SELECT COUNT(*) FROM keys").fetchone() == (100,)  # batches 2 and 3 freed theirs
    # The restarted worker gets every unacknowledged batch again (the supervisor resends them).
    assert serve_file(SparkLoader(config, spark=spark), batches, tmp_path, state) == b"\x00\x00\x00"
    ids = [r["id"] for r in spark.read.parquet(str(tmp_path / "out")).collect()]
    assert len(ids) == len(set(ids)) == 300
    assert not os.listdir(tmp_path / "out" / "_staging")


def test_id_like_columns_are_written_without_a_dictionary(spark, tmp_path) -> None:
    import pyarrow.parquet as pq

    columns = tuple(parse_column(c) for c in ["id=/id", "kind=/kind"])
    config = LoaderConfig(output=str(tmp_path / "out"), columns=columns, key="/id").check()
    run_loader(spark, config, [events(5000)], str(tmp_path / "state"))
    (name,) = [n for n in os.listdir(tmp_path / "out") if n.endswith(".parquet")]
    meta = pq.ParquetFile(tmp_path / "out" / name).metadata.row_group(0)
    encodings = {meta.column(i).path_in_schema: meta.column(i).encodings for i in range(meta.num_columns)}
    assert not any("DICTIONARY" in e for e in encodings["id"]), encodings
    assert any("DICTIONARY" in e for e in encodings["kind"]), encodings


def serve_with_ids(loader: SparkLoader, batches: list[tuple[str, list[bytes]]], state_dir: str) -> bytes:
    """Batches with their ids (stage key ``batch_id: true``: each opens with its header)."""
    stdin = io.BytesIO(
        b"".join(
            b"etlstage-batch-id " + bid.encode() + b"\n" + b"".join(m + b"\n" for m in batch) + b"\x17"
            for bid, batch in batches
        )
    )
    stdout = io.BytesIO()
    scenario = Scenario(type="L", mode="batch", batch_size=1000, stage="load", state_dir=state_dir, batch_id=True)
    serve(loader, stdin=stdin, stdout=stdout, scenario=scenario)
    return stdout.getvalue()


def test_a_batch_whose_id_is_committed_is_acknowledged_without_loading(spark, tmp_path) -> None:
    """Plain files: the key index records each batch under its id, and a batch sent again
    (to a new process, as after a crash) with a committed id is acknowledged without a
    parse, a claim or a Spark job. The "again" here carries keys the index lacks (which the
    keys alone would load): only the id can skip it. A new id loads them."""
    config = LoaderConfig(output=str(tmp_path / "out"), columns=(parse_column("id=/id"),), key="/id").check()
    state = str(tmp_path / "state")
    x, y = "a" * 32, "b" * 32
    assert serve_with_ids(SparkLoader(config, spark=spark), [(x, events(5))], state) == b"\x00"
    acks = serve_with_ids(SparkLoader(config, spark=spark), [(x, events(5, start=5))], state)
    assert acks == b"\x00"
    assert sorted(r["id"] for r in spark.read.parquet(str(tmp_path / "out")).collect()) == [f"e{i}" for i in range(5)]
    acks = serve_with_ids(SparkLoader(config, spark=spark), [(x, events(5, start=5)), (y, events(5, start=5))], state)
    assert acks == b"\x00\x00"
    ids = sorted(r["id"] for r in spark.read.parquet(str(tmp_path / "out")).collect())
    assert ids == sorted(f"e{i}" for i in range(10)), ids
    (index,) = [n for n in os.listdir(state) if n.endswith(".sqlite")]
    names = sqlite3.connect(os.path.join(state, index)).execute("SELECT batch FROM batches ORDER BY id").fetchall()
    assert names == [(f"i0-{x}",), (f"i0-{y}",)]
