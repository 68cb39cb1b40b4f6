"""Shared helpers for the RDSS worker tests: official reference files, message builders, runners."""

from __future__ import annotations

import copy
import io
import json
import uuid
from pathlib import Path
from typing import Any

import pytest
from etlstage_workers.rdss.codes import queue_of
from etlstage_workers.rdss.worker import Options, RdssTransformer

from etlstage.protocol.scenario import Scenario
from etlstage.worker import serve

OFFICIAL = Path(__file__).resolve().parents[3] / "tests" / "data" / "rdss"
FUTURE = "2099-01-01T00:00:00Z"


def official_message(spec: str = "3.0.2") -> dict[str, Any]:
    name = "messages/message.json" if spec == "3.0.2" else "messages/example_message.json"
    return json.loads((OFFICIAL / spec / name).read_text())


def fresh(doc: dict[str, Any] | None = None) -> dict[str, Any]:
    """The official 3.0.2 example as a message that must pass: not expired, no upstream error code."""
    doc = copy.deepcopy(doc or official_message())
    h = doc["messageHeader"]
    h["messageId"] = str(uuid.uuid4())
    h["messageTimings"]["expirationTimestamp"] = FUTURE
    h.pop("errorCode", None)
    h.pop("errorDescription", None)
    return doc


def compact(doc: Any) -> bytes:
    return json.dumps(doc, separators=(",", ":")).encode()


def split_message(doc: dict[str, Any], total: int, *, first_id: str | None = None) -> list[bytes]:
    """The spec's producer: the serialised body cut into ``total`` consecutive string slices."""
    text = json.dumps(doc["messageBody"])
    step = -(-len(text) // total)
    seq = str(uuid.uuid4())
    parts = []
    for i in range(total):
        h = copy.deepcopy(doc["messageHeader"])
        h["messageId"] = first_id or h["messageId"] if i == 0 else str(uuid.uuid4())
        h["messageSequence"] = {"sequence": seq, "position": i + 1, "total": total}
        parts.append(compact({"messageHeader": h, "messageBody": text[i * step : (i + 1) * step]}))
    return parts


def run_batches(batches: list[list[bytes]], state_dir: Path, clock: Any = None, **opts: Any) -> list[dict[str, Any]]:
    """Run one in-process worker over batches (supervisor-driven batch mode); the parsed results."""
    t = RdssTransformer(Options(state_dir=str(state_dir), **opts), **({"clock": clock} if clock else {}))
    sc = Scenario(
        type="T", mode="batch", batch_size=max(1, max((len(b) for b in batches), default=1)), state_dir=str(state_dir)
    )
    stdin = b"".join(b"".join(m + b"\n" for m in batch) + b"\x17" for batch in batches)
    out = io.BytesIO()
    serve(t, stdin=io.BytesIO(stdin), stdout=out, scenario=sc)
    return [json.loads(line) for line in out.getvalue().replace(b"\x00", b"").split(b"\n") if line]


def route(results: list[dict[str, Any]]) -> list[tuple[str, str | None]]:
    return [(queue_of(r["messageHeader"].get("errorCode")), r["messageHeader"].get("errorCode")) for r in results]


@pytest.fixture
def state(tmp_path: Path) -> Path:
    return tmp_path / "state"
