"""A --once run on the Spark engine with nothing new starts no JVM (etlstage/spark/driver/idle.py).

The pipeline's native source is asked, with the offset of the query's last committed
micro-batch, whether it has anything after it; only a plain no ends the run before Spark
starts. Every doubt starts Spark as before. No JVM here: starting the session is replaced
by a stand-in that says it was asked for."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest

from etlstage.config.loader import load_config
from etlstage.spark.checkpoint import committed_offsets
from etlstage.spark.driver import run as run_module
from etlstage.spark.setup import spark_session
from etlstage.state.store import StateStore
from tests.support.paths import ROOT

OFFSET = {"batch": 3, "shards": {"s-0": "49"}}
SOURCE_LINE = json.dumps(OFFSET)


@pytest.fixture(autouse=True)
def importable_fixtures(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(ROOT))


@pytest.fixture
def spark_starts(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Each call to start Spark, refused at once: the run then ends with exit status 2."""
    calls: list[str] = []

    def refuse(master: str, *args: object, **kwargs: object) -> None:
        calls.append(master)
        raise spark_session.SparkStartError("Spark start refused by the test")

    monkeypatch.setattr(spark_session, "start_session", refuse)
    return calls


def pipeline(tmp_path: Path, answer: str) -> Path:
    (tmp_path / "answer").write_text(answer)
    (tmp_path / "stages.yaml").write_text(
        'stages:\n  - {name: gen, type: E, mode: cyclic, native: "tests.fixtures.idle_source:source", command: [idle, answer]}\n'
        "  - {name: load, type: L, command: [cat]}\n"
    )
    return tmp_path / "stages.yaml"


def spark_log(checkpoint: Path, batch: int, *, offsets: str | None = None, committed: bool = True) -> None:
    """Batch ``batch`` in Spark's offset log (and its commit log), as Spark writes them."""
    (checkpoint / "offsets").mkdir(parents=True, exist_ok=True)
    (checkpoint / "commits").mkdir(parents=True, exist_ok=True)
    meta = '{"batchWatermarkMs":0,"batchTimestampMs":1764979200000,"conf":{}}'
    (checkpoint / "offsets" / str(batch)).write_text(offsets or f"v1\n{meta}\n{SOURCE_LINE}")
    if committed:
        (checkpoint / "commits" / str(batch)).write_text('v1\n{"nextBatchWatermarkMs":0}')


def run(path: Path, once: bool = True, attach: Any = None) -> int:
    config = load_config(path)
    return run_module.run_query(config, once=once, progress=False, attach=attach)


def checkpoint_of(path: Path) -> Path:
    return Path(load_config(path).engine.checkpoint)


def asked(tmp_path: Path) -> list[dict[str, object]]:
    f = tmp_path / "answer.asked"
    return [json.loads(line) for line in f.read_text().splitlines()] if f.exists() else []


def test_nothing_after_the_last_committed_batch_ends_the_run_before_spark(
    tmp_path: Path, spark_starts: list[str], caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]
) -> None:
    path = pipeline(tmp_path, "no")
    spark_log(checkpoint_of(path), 2)
    spark_log(checkpoint_of(path), 3)
    attached: list[str] = []  # the endpoints and the metrics export see the run, and its end

    def attach(counts: Any) -> Any:
        attached.append(f"on: {counts.no_query}")
        return lambda: attached.append(f"off: {counts.no_query}")

    with caplog.at_level(logging.INFO, "etlstage"):
        assert run(path, attach=attach) == 0
    assert spark_starts == []
    assert attached == ["on: None", "off: nothing new to load, Spark not started"]
    assert asked(tmp_path) == [OFFSET]  # the last batch's offset, as the query would plan from it
    assert "nothing new to load: stage 'gen' has nothing after the last committed micro-batch (asked in " in caplog.text
    assert "micro-batches committed in this run: 0; no query: nothing new to load" in capsys.readouterr().err


@pytest.mark.parametrize("answer", ["yes", "fail"])
def test_a_source_with_something_or_no_answer_starts_spark(
    tmp_path: Path, spark_starts: list[str], answer: str
) -> None:
    path = pipeline(tmp_path, answer)
    spark_log(checkpoint_of(path), 3)
    assert run(path) == 2
    assert len(spark_starts) == 1
    assert asked(tmp_path) == [OFFSET]


def test_a_batch_planned_and_not_committed_starts_spark_unasked(tmp_path: Path, spark_starts: list[str]) -> None:
    """Spark replays it: the source is not asked about what lies after it."""
    path = pipeline(tmp_path, "no")
    spark_log(checkpoint_of(path), 3)
    spark_log(checkpoint_of(path), 4, committed=False)
    assert run(path) == 2
    assert (len(spark_starts), asked(tmp_path)) == (1, [])


def test_a_first_run_starts_spark_unasked(tmp_path: Path, spark_starts: list[str]) -> None:
    path = pipeline(tmp_path, "no")
    assert run(path) == 2
    assert (len(spark_starts), asked(tmp_path)) == (1, [])


def test_a_run_without_once_starts_spark_unasked(tmp_path: Path, spark_starts: list[str]) -> None:
    path = pipeline(tmp_path, "no")
    spark_log(checkpoint_of(path), 3)
    assert run(path, once=False) == 2
    assert (len(spark_starts), asked(tmp_path)) == (1, [])


def test_through_spark_connect_the_checkpoint_is_the_server_s_and_spark_starts_unasked(
    tmp_path: Path, spark_starts: list[str]
) -> None:
    path = pipeline(tmp_path, "no")
    with path.open("a") as f:
        f.write('engine: {master: "sc://127.0.0.1:1"}\n')
    spark_log(checkpoint_of(path), 3)
    assert run(path) == 2
    assert (spark_starts, asked(tmp_path)) == (["sc://127.0.0.1:1"], [])


def test_dead_letters_marked_for_replay_start_spark(tmp_path: Path, spark_starts: list[str]) -> None:
    path = pipeline(tmp_path, "no")
    spark_log(checkpoint_of(path), 3)
    store = StateStore(load_config(path).state_dir)
    try:
        store.set_deadletter_status([store.add_deadletter("load", 3, "boom", b"m\n", 1, 10)], "replay")
    finally:
        store.close()
    assert run(path) == 2
    assert (len(spark_starts), asked(tmp_path)) == (1, [])


@pytest.mark.parametrize(
    "entry",
    [
        "v1\n{}\nnot json",  # damaged: the query's start names it
        'v1\n{}\n{"batch": 3}\n{"batch": 1}',  # two sources: not this pipeline's query
        "v1\n{}\n-",  # the source had no offset
    ],
)
def test_an_offset_log_entry_it_cannot_read_as_one_source_starts_spark_unasked(
    tmp_path: Path, spark_starts: list[str], entry: str
) -> None:
    path = pipeline(tmp_path, "no")
    spark_log(checkpoint_of(path), 3, offsets=entry)
    assert run(path) == 2
    assert (len(spark_starts), asked(tmp_path)) == (1, [])


def test_committed_offsets_reads_the_last_batch_only_when_committed(tmp_path: Path) -> None:
    assert committed_offsets(tmp_path / "none") is None
    spark_log(tmp_path, 0)
    assert committed_offsets(tmp_path) == [SOURCE_LINE]
    spark_log(tmp_path, 1, committed=False)
    assert committed_offsets(tmp_path) is None
