"""Every error code on real messages (the official example, mutated), with precise descriptions."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from etlstage_workers.rdss.output import derived_message_id
from etlstage_workers.rdss.schemas import load_schema_set
from etlstage_workers.rdss.validate import DEFAULT_MAX_BYTES, MessageValidator

from .conftest import compact, fresh, official_message, route, run_batches

NOW = 1_800_000_000.0  # 2027-01-15


@pytest.fixture(scope="module")
def validator() -> MessageValidator:
    return MessageValidator(load_schema_set("3.0.2"), clock=lambda: NOW)


def check(validator: MessageValidator, doc: Any) -> tuple[str | None, str | None]:
    v = validator.check(compact(doc) if not isinstance(doc, bytes) else doc)
    return v.code, v.description


def mutate(fn: Any) -> dict[str, Any]:
    doc = fresh()
    fn(doc)
    return doc


def test_the_official_example_is_valid(validator: MessageValidator) -> None:
    assert check(validator, fresh()) == (None, None)


@pytest.mark.parametrize(
    "raw, expected",
    [
        (b'{"messageHeader": {', "malformed JSON: Expecting property name"),
        (b"\xff\xfe{}", "not UTF-8 text (byte 0xff at offset 0)"),
        (b'{"messageHeader": NaN}', "NaN is not valid JSON"),
        (b"", "malformed JSON"),
    ],
)
def test_malformed_json_is_generr007(validator: MessageValidator, raw: bytes, expected: str) -> None:
    code, why = check(validator, raw)
    assert code == "GENERR007" and expected in why


@pytest.mark.parametrize(
    "change, expected",
    [
        (lambda d: d.pop("messageHeader"), "messageHeader: missing"),
        (lambda d: d.update(messageHeader="header"), "messageHeader: a str, expected an object"),
        (lambda d: d["messageHeader"].pop("generator"), "messageHeader: missing required field 'generator'"),
        (lambda d: d["messageHeader"].update(priority=1), "messageHeader: unexpected field 'priority'"),
        (lambda d: d["messageHeader"].update(version=3), "messageHeader.version: expected string, got integer 3"),
        (
            lambda d: d["messageHeader"]["messageSequence"].update(position="1"),
            "messageSequence.position: expected integer",
        ),
        (lambda d: d["messageHeader"]["messageSequence"].update(position=3), "position: 3 is outside 1..1"),
        (
            lambda d: d["messageHeader"].update(messageClass="Query"),
            "messageHeader.messageClass: 'Query' is not one of",
        ),
        (
            lambda d: d["messageHeader"]["messageTimings"].update(publishedTimestamp="2004-08-01 10:00:00"),
            "messageHeader.messageTimings.publishedTimestamp: '2004-08-01 10:00:00' is not a valid timestamp",
        ),
        (
            lambda d: d["messageHeader"]["messageTimings"].update(publishedTimestamp="2004-08-01T10:00:00"),
            "'2004-08-01T10:00:00' is not a valid timestamp (expected an RFC 3339 timestamp with date, time and zone",
        ),
        (
            lambda d: d["messageHeader"]["messageHistory"][0].update(timestamp="2004-13-01T10:00:00Z"),
            "messageHeader.messageHistory[0].timestamp: '2004-13-01T10:00:00Z'",
        ),
        (lambda d: d.update(extra=1), "message: unexpected field 'extra'"),
    ],
)
def test_header_problems_are_generr004(validator: MessageValidator, change: Any, expected: str) -> None:
    code, why = check(validator, mutate(change))
    assert code == "GENERR004", why
    assert expected in why


@pytest.mark.parametrize(
    "change, where",
    [
        (
            lambda d: d["messageHeader"].update(messageId=d["messageHeader"]["messageId"].upper()),
            "messageHeader.messageId",
        ),
        (
            lambda d: d["messageHeader"].update(correlationId="4501437a-ce95-0372-be5c-277cb6a826eb"),
            "messageHeader.correlationId",
        ),
        (
            lambda d: d["messageHeader"]["messageSequence"].update(sequence="6ad8194d"),
            "messageHeader.messageSequence.sequence",
        ),
        (
            lambda d: d["messageBody"].update(objectUuid="5680e8e0-28a5-4b20-c48e-fd0d08781e0b"),
            "messageBody.objectUuid",
        ),
        (
            lambda d: d["messageBody"]["objectFile"][0]["fileChecksum"][0].update(checksumUuid="{df23b46b}"),
            "messageBody.objectFile[0].fileChecksum[0].checksumUuid",
        ),
    ],
)
def test_invalid_uuids_anywhere_are_generr010(validator: MessageValidator, change: Any, where: str) -> None:
    code, why = check(validator, mutate(change))
    assert code == "GENERR010"
    assert why.startswith(where + ": ") and "is not a valid UUID (expected a lower-case RFC 4122 UUID" in why


def test_an_invalid_uuid_wins_over_other_problems(validator: MessageValidator) -> None:
    def change(d: dict[str, Any]) -> None:
        d["messageHeader"]["priority"] = 1
        d["messageBody"]["objectUuid"] = "nope"
        del d["messageBody"]["objectTitle"]

    code, why = check(validator, mutate(change))
    assert code == "GENERR010" and "messageBody.objectUuid: 'nope'" in why and "(and 2 other problems)" in why


def test_unsupported_message_type_is_generr002(validator: MessageValidator) -> None:
    code, why = check(validator, mutate(lambda d: d["messageHeader"].update(messageType="MetadataArchive")))
    assert code == "GENERR002"
    assert "messageHeader.messageType: 'MetadataArchive' is not one of 'MetadataCreate'" in why and "spec 3.0.2" in why


def test_a_40_message_type_is_unsupported_under_302(validator: MessageValidator) -> None:
    code, _ = check(validator, mutate(lambda d: d["messageHeader"].update(messageType="PreservationEvent")))
    assert code == "GENERR002"


@pytest.mark.parametrize(
    "change, expected",
    [
        (lambda d: d["messageBody"].pop("objectTitle"), "messageBody: missing required field 'objectTitle'"),
        (
            lambda d: d["messageBody"].update(objectValue=4),
            "messageBody.objectValue: 4 is out of range (expected at most 3)",
        ),
        (
            lambda d: d["messageBody"]["objectDate"][0].update(dateValue="2002-10-02"),
            "messageBody.objectDate[0].dateValue: '2002-10-02' is not a valid timestamp",
        ),
        (
            lambda d: d["messageBody"]["objectPersonRole"][0]["person"].update(personMail="no at sign"),
            "personMail: 'no at sign' is not a valid email",
        ),
        (
            lambda d: d["messageBody"]["objectKeywords"].append("string"),
            "messageBody.objectKeywords: contains duplicate items",
        ),
        (lambda d: d.update(messageBody=[]), "messageBody: expected object, got array"),
        (lambda d: d.pop("messageBody"), "message: missing required field 'messageBody'"),
    ],
)
def test_body_problems_are_generr001(validator: MessageValidator, change: Any, expected: str) -> None:
    code, why = check(validator, mutate(change))
    assert code == "GENERR001", why
    assert expected in why


def test_the_body_schema_follows_the_message_type(validator: MessageValidator) -> None:
    delete = mutate(lambda d: d["messageHeader"].update(messageType="MetadataDelete"))
    code, why = check(validator, delete)
    assert code == "GENERR001" and "messageBody: unexpected fields 'objectTitle'" in why
    delete["messageBody"] = {"objectUuid": "ec366f27-fd43-44bf-b539-3309775d570b"}
    assert check(validator, delete) == (None, None)
    read = copy.deepcopy(delete)
    read["messageHeader"]["messageType"] = "MetadataRead"
    assert check(validator, read) == (None, None)
    read["messageHeader"]["messageClass"] = "Document"  # a response carries the whole object
    assert check(validator, read)[0] == "GENERR001"


def test_expired_is_generr003(validator: MessageValidator) -> None:
    doc = official_message()  # its expirationTimestamp is 2004-08-01T10:00:00-00:00
    del doc["messageHeader"]["errorCode"], doc["messageHeader"]["errorDescription"]
    code, why = check(validator, doc)
    assert code == "GENERR003"
    assert why == (
        "messageHeader.messageTimings.expirationTimestamp: '2004-08-01T10:00:00-00:00' had passed at delivery "
        "(2027-01-15T08:00:00Z)"
    )
    later = mutate(
        lambda d: d["messageHeader"]["messageTimings"].update(expirationTimestamp="2027-01-15T09:00:01+01:00")
    )
    assert check(validator, later) == (None, None)
    assert MessageValidator(load_schema_set("3.0.2"), check_expiry=False).check(compact(doc)).code is None


def _sized(size: int) -> bytes:
    doc = fresh()
    doc["messageBody"]["objectDescription"] = "x"
    base = len(compact(doc))
    doc["messageBody"]["objectDescription"] = "x" * (size - base + 1)
    raw = compact(doc)
    assert len(raw) == size
    return raw


def test_the_size_limit_at_the_boundary(validator: MessageValidator) -> None:
    assert DEFAULT_MAX_BYTES == 1_024_000
    assert validator.check(_sized(DEFAULT_MAX_BYTES)).code is None
    over = validator.check(_sized(DEFAULT_MAX_BYTES + 1))
    assert over.code == "GENERR006"
    assert over.description == "message: serialised size 1024001 bytes is over the limit of 1024000 bytes (1000 KB)"


def test_an_oversized_message_goes_to_the_error_queue_decorated(state: Any) -> None:
    raw = _sized(DEFAULT_MAX_BYTES + 10)
    [result] = run_batches([[raw]], state)
    assert route([result]) == [("error", "GENERR006")]
    assert result["messageBody"]["objectDescription"].startswith("xxx")


def test_invalid_messages_are_decorated_and_never_dropped(state: Any) -> None:
    good = fresh()
    bad_header = mutate(lambda d: d["messageHeader"].update(priority=1))
    no_header = {"messageBody": {}}
    results = run_batches(
        [[compact(good), compact(bad_header), b"[1, 2", b"\xff\x00"[:1], compact(no_header), b"42"]], state
    )
    assert route(results) == [
        ("valid", None),
        ("invalid", "GENERR004"),
        ("invalid", "GENERR007"),
        ("invalid", "GENERR007"),
        ("invalid", "GENERR004"),
        ("invalid", "GENERR004"),
    ]
    assert results[0] == good
    assert results[1]["messageHeader"]["priority"] == 1  # the message itself is kept as it came
    assert results[2]["rawPayload"] == "[1, 2" and results[2]["messageBody"] is None
    assert results[3]["rawPayload"] == "/w==" and results[3]["rawPayloadEncoding"] == "base64"
    assert results[4]["messageBody"] == {} and len(results[4]["messageHeader"]["messageId"]) == 36
    assert results[4]["messageHeader"]["messageId"] == derived_message_id(compact(no_header))
    assert results[5]["rawPayload"] == "42"


def test_results_are_compact_ascii_json(state: Any) -> None:
    doc = fresh()
    doc["messageBody"]["objectTitle"] = "Café \u2028 naïve"
    raw = json.dumps(doc, ensure_ascii=False, indent=2).replace("\n", " ").encode()
    [result] = run_batches([[raw]], state)
    assert result["messageBody"]["objectTitle"] == "Café \u2028 naïve"
    out = compact(result)
    assert out.isascii() and b" " not in out.replace(b"Caf\\u00e9 \\u2028 na\\u00efve", b"")


def test_pathological_input_is_reported_not_fatal(state: Any) -> None:
    deep = b"[" * 200_000 + b"]" * 200_000
    deep_body = compact(fresh())[:-2] + b',"x":' + b"[" * 50_000 + b"]" * 50_000 + b"}}"
    results = run_batches([[deep, deep_body, compact(fresh())]], state)
    assert route(results)[0] == ("invalid", "GENERR007")
    assert route(results)[1][0] in ("invalid", "error") and route(results)[2] == ("valid", None)


def test_every_spec_code_has_a_queue() -> None:
    from etlstage_workers.rdss.codes import DESCRIPTIONS, QUEUE_OF_CODE, queue_of

    assert set(QUEUE_OF_CODE) == set(DESCRIPTIONS) == {f"GENERR{i:03d}" for i in range(1, 11)}
    assert {c for c, q in QUEUE_OF_CODE.items() if q == "invalid"} == {
        "GENERR001",
        "GENERR002",
        "GENERR003",
        "GENERR004",
        "GENERR007",
        "GENERR010",
    }
    assert [queue_of(c) for c in ("GENERR005", "GENERR006", "GENERR008", "GENERR009", "APPERRMET001")] == ["error"] * 5
    assert queue_of(None) == queue_of("") == "valid"
