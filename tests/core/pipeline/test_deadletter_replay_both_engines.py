"""`etlstage deadletter replay` on either engine: the next run sends the marked dead
letters again to their stage — by key to the instance that owns it under
``partition_by`` — and marks them replayed once loaded."""

from __future__ import annotations

import json
import zlib
from pathlib import Path

import pytest

from etlstage.state.store import StateStore
from tests.support.engines import Engine

pytestmark = pytest.mark.timeout(300)
N = 40


def owner(key: str, instances: int = 3) -> int:
    """The instance a key belongs to: CRC-32 of its JSON, modulo instances (both engines)."""
    return zlib.crc32(json.dumps(key).encode()) % instances


def message(i: int) -> str:
    return json.dumps({"id": i, "key": f"k{i % 7}"})


def pipeline(data: Path, poison: str) -> str:
    return f"""
stages:
  - {{name: src, type: E, command: [cat, "{data}"]}}
  - {{name: keyed, type: T, instances: 3, partition_by: /key, on_failure: deadletter,
     restart: {{max_restarts: 1, backoff: 0.05}}, command: ["{{PY}}", "{{TW}}", mark, {json.dumps(poison)}]}}
  - {{name: sink, type: L, command: ["{{PY}}", "{{TW}}", append, out.txt]}}
"""


def test_a_replayed_dead_letter_goes_again_to_the_instance_that_owns_its_key(engine: Engine) -> None:
    # instance 2: neither the instance a replay used to take nor where a one-row frame lands
    bad = next(i for i in range(N) if owner(f"k{i % 7}") == 2)
    data = engine.tmp / "in.jsonl"
    data.write_text("".join(message(i) + "\n" for i in range(N)))
    code, log = engine.run(pipeline(data, message(bad)))
    assert code == 0, log[-3000:]
    store = StateStore(engine.tmp / ".etlstage" / "stages")  # the pipeline's folder: named after the file
    dead = store.deadletters()
    assert [(d.stage, d.split(), d.status) for d in dead] == [("keyed", [message(bad).encode()], "new")]
    assert len(engine.lines("out.txt")) == N - 1

    code, out = engine.cli("deadletter", "replay", "--all")
    assert code == 0, out
    data.write_text("")  # the next run extracts nothing new: only the dead letter goes through
    code, log = engine.run(pipeline(data, ""))
    assert code == 0, log[-3000:]
    got = [line.rsplit(" @", 1) for line in engine.lines("out.txt")]
    assert sorted(json.loads(m)["id"] for m, _ in got) == list(range(N)), log[-3000:]
    for m, instance in got:
        assert int(instance) == owner(json.loads(m)["key"]), (m, instance)
    assert [d.status for d in store.deadletters()] == ["replayed"]


def test_a_loaders_dead_letters_are_loaded_when_replayed(engine: Engine) -> None:
    """Dead letters of the L-stage itself: the replay loads them through that stage."""
    data = engine.tmp / "in.txt"
    data.write_text("a\nb\nc\n")
    stages = f"""
stages:
  - {{name: src, type: E, command: [cat, "{data}"]}}
  - {{name: sink, type: L, mode: batch, batch_size: 3, on_failure: deadletter, restart: {{max_restarts: 1, backoff: 0.05}},
     command: ["{{PY}}", "{{MISBEHAVE}}", "{{FLAGS}}", append=out.txt, FAULT]}}
"""
    code, log = engine.run(stages.replace("FAULT", "crash@*"))  # dies on every batch
    assert code == 0, log[-3000:]
    store = StateStore(engine.tmp / ".etlstage" / "stages")  # the pipeline's folder: named after the file
    assert sorted(m for d in store.deadletters() for m in d.split()) == [b"a", b"b", b"c"]
    assert not engine.lines("out.txt")

    code, out = engine.cli("deadletter", "replay", "--all")
    assert code == 0, out
    data.write_text("")
    code, log = engine.run(stages.replace("FAULT", "none@0"))
    assert code == 0, log[-3000:]
    assert sorted(engine.lines("out.txt")) == ["a", "b", "c"], log[-3000:]
    assert {d.status for d in store.deadletters()} == {"replayed"}
