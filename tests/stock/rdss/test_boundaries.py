"""RDSS validation at its boundaries: a message expiring at the moment of delivery, and a
sequence position of 0 (positions count from 1)."""

from __future__ import annotations

import json

from etlstage_workers.rdss.schemas import load_schema_set
from etlstage_workers.rdss.validate import MessageValidator

from .conftest import compact, fresh

NOW = 1_800_000_000.0  # 2027-01-15T08:00:00Z


def _at(expires: str) -> str | None:
    doc = fresh()
    doc["messageHeader"]["messageTimings"]["expirationTimestamp"] = expires
    return MessageValidator(load_schema_set("3.0.2"), clock=lambda: NOW).check(compact(doc)).code


def test_a_message_expiring_at_delivery_has_expired() -> None:
    assert _at("2027-01-15T08:00:00Z") == "GENERR003"
    assert _at("2027-01-15T08:00:01Z") is None  # one second later it is still valid


def test_position_zero_is_outside_the_sequence() -> None:
    validator = MessageValidator(load_schema_set("3.0.2"), clock=lambda: NOW)
    for total in (1, 3):
        doc = fresh()
        doc["messageHeader"]["messageSequence"].update(position=0, total=total)
        if total > 1:  # a part carries its fragment of the body as a string
            doc["messageBody"] = json.dumps(doc["messageBody"])
        verdict = validator.check(compact(doc))
        assert verdict.code == "GENERR004", (total, verdict.description)
        assert f"position: 0 is outside 1..{total}" in (verdict.description or "")
