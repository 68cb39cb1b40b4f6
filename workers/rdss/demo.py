"""Realistic RDSS 3.0.2 traffic, and exactly what a pipeline must make of it.

``generate(n, seed)`` returns ``(records, expected)``: ``n`` serialised messages (bytes, none
containing 0x0A, 0x00, 0x17 or 0x11) and, per messageId, the table each must end in.  The mix:
valid messages of every messageType/messageClass pair (bodies modelled on the specification's
examples, filled with plausible values and fresh UUIDs), multi-part sequences delivered out
of order and interleaved, exact re-deliveries, malformed JSON (one not even UTF-8), bad UUIDs,
expired messages, a header with an extra field, a body missing a mandatory field, an
unsupported messageType, and one oversized message (1,024,001..1,040,000 bytes).

Ids of messages that have none of their own (malformed JSON) are derived from their bytes as
the worker derives them (:func:`output.derived_message_id`).  A sequence ends in the valid table
under the messageId of its part 1; its other parts' ids are listed under ``absorbed_parts``.
"""

from __future__ import annotations

import json
import os
import random
import uuid
from collections.abc import Callable
from typing import Any

from etlstage_workers.rdss.codes import (
    GENERR001,
    GENERR002,
    GENERR003,
    GENERR004,
    GENERR006,
    GENERR007,
    GENERR010,
    queue_of,
)
from etlstage_workers.rdss.output import derived_message_id

FORBIDDEN = (b"\n", b"\x00", b"\x17", b"\x11")
OVERSIZED_TARGET = 1_030_000  # bytes: over 1000 KiB, under Kinesis's 1 MiB record limit
_GIVEN = ["Ada", "Grace", "Alan", "Rosalind", "Tim", "Dorothy", "Niels", "Marie", "Emmy", "Srinivasa"]
_FAMILY = [
    "Lovelace",
    "Hopper",
    "Turing",
    "Franklin",
    "Berners-Lee",
    "Hodgkin",
    "Bohr",
    "Curie",
    "Noether",
    "Ramanujan",
]
_WORDS = [
    "coastal",
    "erosion",
    "protein",
    "folding",
    "urban",
    "mobility",
    "soil",
    "carbon",
    "glacier",
    "melt",
    "neural",
    "imaging",
    "river",
    "sediment",
    "archive",
    "survey",
    "genome",
    "atlas",
    "climate",
    "model",
]
_ORGS = ["University of Northbridge", "Southvale College", "Eastmoor Institute", "Westfield Research Centre"]
# (messageType, messageClass): 3.0.2 requests are Commands; responses are Documents.
KINDS = [
    ("MetadataCreate", "Command"),
    ("MetadataUpdate", "Command"),
    ("MetadataDelete", "Command"),
    ("MetadataRead", "Command"),
    ("MetadataRead", "Document"),
    ("VocabularyRead", "Command"),
    ("VocabularyRead", "Document"),
    ("VocabularyPatch", "Command"),
]


class _Maker:
    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.clock = 1_767_225_600  # 2026-01-01T00:00:00Z, advanced per message: deterministic timestamps

    def uuid(self) -> str:
        return str(uuid.UUID(int=self.rng.getrandbits(128), version=4))

    def words(self, k: int) -> str:
        return " ".join(self.rng.choice(_WORDS) for _ in range(k))

    def stamp(self, offset: int = 0) -> str:
        t = self.clock + offset
        import time

        return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))

    def organisation(self) -> dict[str, Any]:
        name = self.rng.choice(_ORGS)
        return {
            "organisationJiscId": self.rng.randint(1, 9999),
            "organisationName": name,
            "organisationType": self.rng.randint(1, 15),
            "organisationAddress": f"{name}, Campus Road, UK",
        }

    def person(self) -> dict[str, Any]:
        given, family = self.rng.choice(_GIVEN), self.rng.choice(_FAMILY)
        return {
            "personUuid": self.uuid(),
            "personIdentifier": [
                {
                    "personIdentifierValue": f"0000-000{self.rng.randint(1, 9)}-{self.rng.randint(1000, 9999)}-"
                    f"{self.rng.randint(1000, 9999)}",
                    "personIdentifierType": 1,
                }
            ],
            "personGivenNames": given,
            "personFamilyNames": family,
            "personMail": f"{given.lower()}.{family.lower()}@example.ac.uk",
            "personOrganisationUnit": {
                "organisationUnitUuid": self.uuid(),
                "organisationUnitName": "Department of " + self.rng.choice(_WORDS).title(),
                "organisation": self.organisation(),
            },
        }

    def rights(self) -> dict[str, Any]:
        return {
            "rightsStatement": ["Made available under the licence below."],
            "rightsHolder": [self.rng.choice(_ORGS)],
            "licence": [
                {
                    "licenceName": "CC BY 4.0",
                    "licenceIdentifier": "https://creativecommons.org/licenses/by/4.0/",
                    "licenseStartDate": self.stamp(-86400 * 30),
                }
            ],
            "access": [{"accessType": 1, "accessStatement": "Open access"}],
        }

    def file(self) -> dict[str, Any]:
        name = self.rng.choice(_WORDS) + f"_{self.rng.randint(1, 999)}.csv"
        return {
            "fileUuid": self.uuid(),
            "fileIdentifier": name,
            "fileName": name,
            "fileSize": self.rng.randint(1, 10**9),
            "fileChecksum": [
                {"checksumUuid": self.uuid(), "checksumType": 1, "checksumValue": f"{self.rng.getrandbits(128):032x}"}
            ],
            "fileCompositionLevel": "0",
            "fileDateModified": [self.stamp(-3600)],
            "fileUse": 1,
            "filePreservationEvent": [{"preservationEventValue": "ingested", "preservationEventType": 11}],
            "fileUploadStatus": 2,
            "fileStorageStatus": 1,
            "fileStorageLocation": f"https://repository.example.ac.uk/files/{self.uuid()}",
            "fileStoragePlatform": {
                "storagePlatformUuid": self.uuid(),
                "storagePlatformName": "Repository S3",
                "storagePlatformType": 1,
                "storagePlatformCost": "0.02 GBP/GB/month",
            },
        }

    def research_object(self, files: int = 1) -> dict[str, Any]:
        return {
            "objectUuid": self.uuid(),
            "objectTitle": self.words(4).capitalize(),
            "objectPersonRole": [{"person": self.person(), "role": self.rng.randint(1, 22)}],
            "objectDescription": "A dataset about " + self.words(8) + ".",
            "objectRights": self.rights(),
            "objectDate": [{"dateValue": self.stamp(-86400), "dateType": 6}],
            "objectKeywords": sorted({self.rng.choice(_WORDS) for _ in range(3)}),
            "objectResourceType": 7,
            "objectValue": self.rng.randint(1, 3),
            "objectIdentifier": [
                {
                    "identifierValue": f"10.{self.rng.randint(1000, 9999)}/{self.rng.getrandbits(32):08x}",
                    "identifierType": 4,
                }
            ],
            "objectOrganisationRole": [{"organisation": self.organisation(), "role": 2}],
            "objectFile": [self.file() for _ in range(files)],
        }

    def body(self, mtype: str, mclass: str) -> dict[str, Any]:
        if mtype in ("MetadataCreate", "MetadataUpdate") or (mtype == "MetadataRead" and mclass == "Document"):
            return self.research_object(self.rng.randint(1, 3))
        if mtype in ("MetadataDelete", "MetadataRead"):
            return {"objectUuid": self.uuid()}
        terms = sorted({self.words(2) for _ in range(4)})
        if mtype == "VocabularyPatch":
            return {"vocabularyId": self.rng.randint(1, 50), "vocabularyName": "Subjects", "vocabularyTerms": terms}
        if mclass == "Document":
            return {"vocabularyId": self.rng.randint(1, 50), "vocabularyTerms": terms}
        return {"vocabularyId": self.rng.randint(1, 50)}

    def header(self, mtype: str, mclass: str, *, expired: bool = False) -> dict[str, Any]:
        self.clock += self.rng.randint(1, 5)
        h: dict[str, Any] = {
            "messageId": self.uuid(),
            "messageClass": mclass,
            "messageType": mtype,
            "returnAddress": "rdss-responses",
            "messageTimings": {"publishedTimestamp": self.stamp()},
            "messageSequence": {"sequence": self.uuid(), "position": 1, "total": 1},
            "messageHistory": [
                {
                    "machineId": f"producer-{self.rng.randint(1, 4)}",
                    "machineAddress": f"producer-{self.rng.randint(1, 4)}.example.ac.uk",
                    "timestamp": self.stamp(),
                }
            ],
            "version": "3.0.2",
            "generator": "etlstage-demo",
        }
        if mclass == "Document":
            h["correlationId"] = self.uuid()
        h["messageTimings"]["expirationTimestamp"] = "2001-01-01T00:00:00Z" if expired else "2099-12-31T23:59:59Z"
        return h

    def message(self, kind: tuple[str, str] | None = None, **kw: Any) -> dict[str, Any]:
        mtype, mclass = kind or self.rng.choice(KINDS)
        return {"messageHeader": self.header(mtype, mclass, **kw), "messageBody": self.body(mtype, mclass)}


def _bytes(doc: Any) -> bytes:
    return json.dumps(doc, separators=(",", ":")).encode("ascii")


def generate(n: int, seed: int) -> tuple[list[bytes], dict[str, Any]]:
    """``n`` records and the expected outcome; the same ``(n, seed)`` always gives the same data."""
    m = _Maker(seed)
    rng = m.rng
    units: list[list[bytes]] = []  # a unit is one message or the shuffled parts of one sequence
    outcome: dict[str, dict[str, Any]] = {}
    absorbed: list[str] = []
    used = 0

    def add(doc_or_raw: Any, code: str | None, mid: str | None = None) -> None:
        nonlocal used
        raw = doc_or_raw if isinstance(doc_or_raw, bytes) else _bytes(doc_or_raw)
        key = mid or doc_or_raw["messageHeader"]["messageId"]
        outcome[key] = {"table": queue_of(code), "errorCode": code}
        units.append([raw])
        used += 1

    def bad_uuid() -> None:
        doc = m.message(("MetadataCreate", "Command"))
        where = rng.randrange(3)
        if where == 0:
            doc["messageHeader"]["messageId"] = doc["messageHeader"]["messageId"].upper()
        elif where == 1:
            doc["messageBody"]["objectUuid"] = "not-a-uuid-" + doc["messageBody"]["objectUuid"][:8]
        else:
            doc["messageHeader"]["messageSequence"]["sequence"] = doc["messageHeader"]["messageSequence"]["sequence"][
                :-1
            ]
        add(doc, GENERR010)

    def malformed() -> None:
        text = _bytes(m.message())
        raw = text[: rng.randint(10, len(text) - 2)]
        add(raw, GENERR007, derived_message_id(raw))

    def not_utf8() -> None:
        raw = b'{"messageHeader": \xff\xfe broken'
        add(raw, GENERR007, derived_message_id(raw))

    def expired() -> None:
        add(m.message(expired=True), GENERR003)

    def extra_header_field() -> None:
        doc = m.message()
        doc["messageHeader"]["priority"] = "high"
        add(doc, GENERR004)

    def missing_body_field() -> None:
        doc = m.message(("MetadataCreate", "Command"))
        del doc["messageBody"]["objectTitle"]
        add(doc, GENERR001)

    def unsupported_type() -> None:
        doc = m.message(("MetadataDelete", "Command"))
        doc["messageHeader"]["messageType"] = "MetadataArchive"
        add(doc, GENERR002)

    def oversized() -> None:
        doc = m.message(("MetadataCreate", "Command"))
        size = len(_bytes(doc))
        doc["messageBody"]["objectDescription"] += " " + "x" * (OVERSIZED_TARGET - size - 1)
        add(doc, GENERR006)

    def sequence() -> int:
        nonlocal used
        doc = m.message(("MetadataCreate", "Command"))
        doc["messageBody"]["objectFile"] = [m.file() for _ in range(rng.randint(3, 8))]
        text = json.dumps(doc["messageBody"], separators=(",", ":"))
        total = rng.randint(2, 6)
        step = -(-len(text) // total)
        seq_id = m.uuid()
        parts = []
        for i in range(total):
            header = dict(doc["messageHeader"], messageId=doc["messageHeader"]["messageId"] if i == 0 else m.uuid())
            header["messageSequence"] = {"sequence": seq_id, "position": i + 1, "total": total}
            parts.append(_bytes({"messageHeader": header, "messageBody": text[i * step : (i + 1) * step]}))
            if i:
                absorbed.append(header["messageId"])
        order = list(range(total))
        while order == sorted(order):
            rng.shuffle(order)
        units.append([parts[i] for i in order])
        outcome[doc["messageHeader"]["messageId"]] = {"table": "valid", "errorCode": None}
        used += total
        return total

    specials: list[tuple[float, Callable[[], Any]]] = [
        (0.03, bad_uuid),
        (0.02, malformed),
        (0.03, expired),
        (0.01, extra_header_field),
        (0.01, missing_body_field),
        (0.01, unsupported_type),
    ]
    dup_target = max(1, n // 20) if n >= 20 else 0
    if n >= 20:
        oversized()
    if n >= 40:
        not_utf8()
    for share, make in specials:
        for _ in range(max(1, int(n * share)) if n >= 40 else 0):
            make()
    sequences = parts_total = 0
    seq_budget = n // 10 if n >= 30 else 0
    while parts_total + 6 <= seq_budget:
        parts_total += sequence()
        sequences += 1
    kinds = iter(KINDS * (n + 1))
    while used < n - dup_target:
        add(m.message(next(kinds)), None)
    rng.shuffle(units)
    # Interleave: parts of a sequence are spread over the stream, each keeping its (shuffled) order.
    stream: list[bytes] = []
    pending: list[list[bytes]] = []
    for unit in units:
        pending.append(list(unit))
        take = rng.randrange(len(pending))
        stream.append(pending[take].pop(0))
        pending = [p for p in pending if p]
    while pending:
        stream.append(pending[0].pop(0))
        pending = [p for p in pending if p]
    small = [r for r in stream if len(r) < 100_000]
    duplicates = 0
    while len(stream) < n and small:
        copy = rng.choice(small)
        stream.insert(rng.randint(stream.index(copy) + 1, len(stream)), copy)
        duplicates += 1
    assert len(stream) == n, f"the demo plan made {len(stream)} records for n={n}"
    for r in stream:
        assert not any(b in r for b in FORBIDDEN), "a demo record contains a marker byte"
    per_code: dict[str, int] = {}
    for o in outcome.values():
        if o["errorCode"]:
            per_code[o["errorCode"]] = per_code.get(o["errorCode"], 0) + 1
    tables = {t: sum(1 for o in outcome.values() if o["table"] == t) for t in ("valid", "invalid", "error")}
    expected = {
        "spec": "3.0.2",
        "seed": seed,
        "messages": outcome,
        "absorbed_parts": absorbed,
        "counts": {
            "records": len(stream),
            "valid_unique": tables["valid"],
            "invalid_unique": tables["invalid"],
            "error_unique": tables["error"],
            "duplicates": duplicates,
            "sequences": sequences,
            "sequence_parts": parts_total,
            "per_error_code": per_code,
        },
    }
    return stream, expected


def write_demo(n: int, seed: int, out: str, expected_path: str) -> dict[str, Any]:
    records, expected = generate(n, seed)
    for path in (out, expected_path):
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    # Each file whole or not at all, the records last: their presence is what tells a pipeline's
    # service (``creates:``) that the demo data exists, so a kill in between leaves no half.
    with open(expected_path + ".tmp", "w", encoding="utf-8") as f:
        json.dump(expected, f, indent=1, sort_keys=True)
    os.replace(expected_path + ".tmp", expected_path)
    with open(out + ".tmp", "wb") as f:
        f.writelines(r + b"\n" for r in records)
    os.replace(out + ".tmp", out)
    return dict(expected["counts"])
