"""Multi-message sequences: split 2..50 ways, shuffled, duplicated, spread over batches and worker
restarts, inconsistent totals, timeouts, replays."""

from __future__ import annotations

import copy
import json
import random
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from etlstage_workers.rdss.reassembly import join_fragments

from .conftest import compact, fresh, route, run_batches, split_message


def expected_whole(doc: dict[str, Any], parts: list[bytes]) -> dict[str, Any]:
    whole = copy.deepcopy(doc)
    first = json.loads(parts[0])["messageHeader"]
    whole["messageHeader"] = dict(first, messageSequence=dict(first["messageSequence"], position=1, total=1))
    return whole


@pytest.mark.parametrize("total", [2, 3, 7, 16, 50])
def test_split_n_ways_shuffled_and_duplicated_reassembles_once(state: Path, total: int) -> None:
    rng = random.Random(total)
    doc = fresh()
    parts = split_message(doc, total)
    delivery = parts + rng.sample(parts, min(3, total))  # some parts delivered twice
    rng.shuffle(delivery)
    while json.loads(delivery[-1])["messageHeader"]["messageSequence"]["position"] == 1 and total > 1:
        rng.shuffle(delivery)
    batches = [delivery[i : i + 4] for i in range(0, len(delivery), 4)]
    results = run_batches(batches, state)
    wholes = [r for r in results if r["messageHeader"].get("errorCode") is None]
    assert route(results) == [("valid", None)] * len(results)
    assert wholes[0] == expected_whole(doc, parts)
    # The completing batch emits it once; a later duplicate part re-emits the same message (same messageId).
    assert {r["messageHeader"]["messageId"] for r in wholes} == {json.loads(parts[0])["messageHeader"]["messageId"]}


def test_parts_spread_over_restarts_are_kept(state: Path) -> None:
    doc = fresh()
    parts = split_message(doc, 5)
    order = [3, 0, 4, 1, 2]
    results: list[dict[str, Any]] = []
    for i in order:  # a new worker (a restart) for every part
        results += run_batches([[parts[i]]], state)
    assert results == [expected_whole(doc, parts)]
    db = sqlite3.connect(state / "rdss-ldr.sqlite")
    assert db.execute("SELECT status FROM sequences").fetchall() == [("EMITTED",)]
    rows = db.execute(
        "SELECT message_class, message_type, sequence, position, status FROM messages ORDER BY position"
    ).fetchall()
    seq = json.loads(parts[0])["messageHeader"]["messageSequence"]["sequence"]
    assert rows == [("Command", "MetadataCreate", seq, p, "RECEIVED") for p in range(1, 6)]


def test_a_replayed_window_re_emits_the_reassembled_message(state: Path) -> None:
    doc = fresh()
    parts = split_message(doc, 3)
    first = run_batches([[parts[0], parts[1]], [parts[2]]], state)
    assert len(first) == 1
    # The loader failed before acknowledging: the supervisor replays the last batch.
    again = run_batches([[parts[2]]], state)
    assert again == first
    # A replay of everything emits it once per batch, never swallows it.
    assert run_batches([[parts[0], parts[1], parts[2]]], state) == first


def test_inconsistent_total_is_generr004_and_the_sequence_still_completes(state: Path) -> None:
    doc = fresh()
    parts = split_message(doc, 3)
    liar = json.loads(parts[1])
    liar["messageHeader"]["messageSequence"]["total"] = 4
    liar["messageHeader"]["messageId"] = "0c5d1fd8-2f0e-4b11-9a36-5a2c7bd4f7f1"
    results = run_batches([[parts[0], compact(liar), parts[1], parts[2]]], state)
    assert route(results) == [("invalid", "GENERR004"), ("valid", None)]
    assert (
        "messageHeader.messageSequence.total: 4 disagrees with total 3"
        in results[0]["messageHeader"]["errorDescription"]
    )


def test_a_conflicting_part_is_generr004(state: Path) -> None:
    parts = split_message(fresh(), 3)
    other = json.loads(parts[1])
    other["messageBody"] = "something else"
    results = run_batches([[parts[1], compact(other)]], state)
    assert route(results) == [("invalid", "GENERR004")]
    assert "was already received with a different fragment" in results[0]["messageHeader"]["errorDescription"]


def test_a_part_with_an_object_body_is_generr001(state: Path) -> None:
    doc = fresh()
    doc["messageHeader"]["messageSequence"]["total"] = 2
    [result] = run_batches([[compact(doc)]], state)
    assert route([result]) == [("invalid", "GENERR001")]
    assert (
        "must carry its fragment of the serialised body as a JSON string" in result["messageHeader"]["errorDescription"]
    )


class Clock:
    def __init__(self, t: float) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def test_incomplete_sequence_times_out_with_its_parts_as_generr009(state: Path) -> None:
    clock = Clock(1_900_000_000.0)
    parts = split_message(fresh(), 4)
    assert run_batches([[parts[2], parts[0]]], state, clock=clock, sequence_timeout_s=600) == []
    clock.t += 601
    trigger = compact(fresh())
    results = run_batches([[trigger]], state, clock=clock, sequence_timeout_s=600)
    assert route(results) == [("valid", None), ("error", "GENERR009"), ("error", "GENERR009")]
    why = results[1]["messageHeader"]["errorDescription"]
    assert "incomplete after the timeout of 600 s" in why and "have positions [1, 3] of total 4" in why
    assert [r["messageBody"] for r in results[1:]] == [
        json.loads(parts[0])["messageBody"],
        json.loads(parts[2])["messageBody"],
    ]
    # The batch that emitted them is replayed (the loader failed): they come out again.
    again = run_batches([[trigger]], state, clock=clock, sequence_timeout_s=600)
    assert again == results
    # A late part of the timed-out sequence is an error too, never silently dropped.
    late = run_batches([[parts[1]]], state, clock=clock, sequence_timeout_s=600)
    assert (
        route(late) == [("error", "GENERR009")]
        and "after the sequence timed out" in late[0]["messageHeader"]["errorDescription"]
    )


def test_retention_forgets_finished_sequences(state: Path) -> None:
    clock = Clock(1_900_000_000.0)
    parts = split_message(fresh(), 2)
    assert len(run_batches([parts], state, clock=clock, retention_s=3600)) == 1
    clock.t += 3601
    run_batches([[compact(fresh())]], state, clock=clock, retention_s=3600)
    db = sqlite3.connect(state / "rdss-ldr.sqlite")
    assert db.execute("SELECT COUNT(*) FROM sequences").fetchone() == (0,)
    assert db.execute("SELECT COUNT(*) FROM parts").fetchone() == (0,)
    assert db.execute("SELECT COUNT(*) FROM messages").fetchone() == (1,)


def test_reassembled_body_is_validated_for_its_message_type(state: Path) -> None:
    doc = fresh()
    del doc["messageBody"]["objectTitle"]
    results = run_batches([split_message(doc, 3)], state)
    assert route(results) == [("invalid", "GENERR001")]
    assert results[0]["messageHeader"]["errorDescription"].startswith(
        "messageBody: missing required field 'objectTitle'"
    )
    assert "(reassembled from 3 parts of sequence" in results[0]["messageHeader"]["errorDescription"]


def test_fragments_that_do_not_join_into_json_are_generr007_with_the_text(state: Path) -> None:
    doc = fresh()
    parts = [json.loads(p) for p in split_message(doc, 2)]
    parts[1]["messageBody"] = parts[1]["messageBody"][:-1]
    results = run_batches([[compact(p) for p in parts]], state)
    assert route(results) == [("invalid", "GENERR007")]
    assert results[0]["rawPayload"] == parts[0]["messageBody"] + parts[1]["messageBody"]


def test_python_literal_bodies_from_the_spec_producer_join() -> None:
    body = {"objectUuid": "5680e8e0-28a5-4b20-948e-fd0d08781e0b", "flag": True, "n": None}
    text = str(body)  # what the spec's split_payload() serialises
    assert join_fragments([text[:10], text[10:]]) == (body, None)


def test_duplicates_are_counted_never_dropped_across_batches(state: Path) -> None:
    doc = compact(fresh())
    results = run_batches([[doc, doc], [doc]], state)
    assert len(results) == 2  # one per batch: the in-batch exact copy is dropped (same fate)
    db = sqlite3.connect(state / "rdss-ldr.sqlite")
    assert db.execute("SELECT seen_count FROM messages").fetchone() == (2,)
