"""The Python SDK against the shared protocol test vectors (sdk/vectors/)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

VECTORS = Path(__file__).resolve().parents[2] / "sdk" / "vectors"


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("sdk_vectors_generate", VECTORS / "generate.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


generate = _generator()


def _vectors() -> list[dict[str, Any]]:
    found = []
    for path in sorted(VECTORS.glob("*.json")):
        found.extend(json.loads(path.read_text()))
    return found


ALL = _vectors()


def test_vector_names_unique_and_every_file_read() -> None:
    names = [v["name"] for v in ALL]
    assert len(names) == len(set(names))
    assert {p.stem for p in VECTORS.glob("*.json")} == set(generate.FILES)


def test_files_are_what_the_generator_writes() -> None:
    for name, text in generate.render().items():
        assert (VECTORS / name).read_text() == text, f"{name} is stale: run python sdk/vectors/generate.py"


@pytest.mark.parametrize("vector", ALL, ids=[v["name"] for v in ALL])
def test_python_sdk_meets_vector(vector: dict[str, Any]) -> None:
    inputs = {
        k: vector[k] for k in ("name", "about", "env", "handler", "stdin") + (("args",) if "args" in vector else ())
    }
    assert generate.run_case(inputs) == vector


def test_replies_add_up_to_stdout() -> None:
    for v in ALL:
        if v["exit"] == 0:
            assert len(v["replies"]) == len(v["stdin"]) + 1, v["name"]
            joined = b"".join(generate.b64d(r) for r in v["replies"])
            assert joined == generate.b64d(v["stdout"]), v["name"]


# Spot checks written by hand from docs/protocol.md, so a change in the SDK cannot move
# the reference and the vectors together unnoticed.
HAND = {
    "t-batch-worker": [b"", b"\x11", b"\x11", b"m1\nm2\nm3\n\x00", b"\x11"],
    "t-batch-worker-partial": [b"", b"\x11", b"m1\n\x00"],
    "t-batch-supervisor": [b"", b"3\n\x001\n\x00"],
    "e-cyclic-worker-offsets": [b"", b"a\nb\n\x00", b"\x00c\n\x00", b"\x00"],
    "l-batch-worker": [b"", b"\x11", b"\x00", b"\x11", b"\x00"],
    "e-plain": [b"a\nb\n"],
    "t-single-empty-messages": [b"", b"\n\x00\n\x00x\n\x00\n\x00"],
    "t-batch-worker-eof": [b"", b"\x11", b"\x11"],
}


@pytest.mark.parametrize("name", sorted(HAND))
def test_vector_matches_protocol_by_hand(name: str) -> None:
    (vector,) = [v for v in ALL if v["name"] == name]
    assert [generate.b64d(r) for r in vector["replies"]] == HAND[name]


def test_commit_rule_by_hand() -> None:
    (vector,) = [v for v in ALL if v["name"] == "e-cyclic-worker-offsets"]
    assert vector["commits"] == [0, 1, 2]  # four requests; the last cycle is never committed on EOF
