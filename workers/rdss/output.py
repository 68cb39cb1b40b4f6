"""Serialising results: compact, ASCII-only JSON (so no marker byte can appear in it), and
the decoration of invalid messages per the spec (``errorCode``/``errorDescription`` in the
``messageHeader``).

A payload that cannot be decorated in place (not JSON, not a JSON object, or a messageHeader
that is not an object) is wrapped so it survives byte for byte::

    {"messageHeader": {"messageId": "<uuid5 of the bytes>", "errorCode": "GENERR007",
     "errorDescription": "..."}, "messageBody": null, "rawPayload": "<the text>"}

``rawPayloadEncoding: "base64"`` is added (and ``rawPayload`` is base64) when the bytes are
not UTF-8.  The messageId is derived from the bytes, so a replayed copy gets the same id and
the loader's idempotent load absorbs it.
"""

from __future__ import annotations

import base64
import hashlib
import json
import uuid
from typing import Any

# Namespace of the messageIds derived for wrapped payloads (a fixed, project-specific UUID).
WRAP_NAMESPACE = uuid.UUID("5e7f2a10-6b1c-4c3e-9d2a-7a4b0c1d2e3f")


def dumps(doc: Any) -> bytes:
    return json.dumps(doc, separators=(",", ":")).encode("ascii")


def passthrough(raw: bytes, doc: Any) -> bytes:
    """A valid message as it came when that is already safe (ASCII, no control bytes), else re-serialised.

    Safe bytes cannot contain a marker (markers are control bytes), so re-encoding would only cost time.
    ``raw`` parsed as strict JSON, whose strings cannot hold raw control characters: the only control
    bytes it can contain are the whitespace tab, LF and CR (and DEL, which JSON allows anywhere).

    >>> passthrough(b'{"a": "x"}', {"a": "x"}), passthrough(b'{"a":\\t1}', {"a": 1})
    (b'{"a": "x"}', b'{"a":1}')
    """
    if raw.isascii() and b"\t" not in raw and b"\n" not in raw and b"\r" not in raw and b"\x7f" not in raw:
        return raw
    return dumps(doc)


def derived_message_id(raw: bytes) -> str:
    return str(uuid.uuid5(WRAP_NAMESPACE, hashlib.sha256(raw).hexdigest()))


def decorate(doc: dict[str, Any], code: str, description: str) -> dict[str, Any]:
    """Set errorCode/errorDescription in ``doc``'s messageHeader (created if absent); ``doc`` is changed."""
    header = doc.get("messageHeader")
    if header is None:
        header = doc["messageHeader"] = {}
    previous = header.get("errorCode")
    if previous and previous != code:
        description += f" (the message already carried errorCode {previous!r}: {header.get('errorDescription')!r})"
    header["errorCode"] = code
    header["errorDescription"] = description
    return doc


def can_decorate(doc: Any) -> bool:
    return isinstance(doc, dict) and isinstance(doc.get("messageHeader", {}), dict)


def wrap_raw(raw: bytes, code: str, description: str) -> dict[str, Any]:
    header = {"messageId": derived_message_id(raw), "errorCode": code, "errorDescription": description}
    doc: dict[str, Any] = {"messageHeader": header, "messageBody": None}
    try:
        doc["rawPayload"] = raw.decode("utf-8")
    except UnicodeDecodeError:
        doc["rawPayload"] = base64.b64encode(raw).decode("ascii")
        doc["rawPayloadEncoding"] = "base64"
    return doc


def error_result(raw: bytes, doc: Any, code: str, description: str) -> bytes:
    """The serialised error message for an input: decorated in place when possible, else wrapped."""
    if can_decorate(doc):
        header = doc.setdefault("messageHeader", {})
        if "messageId" not in header:  # give the loader a stable key for an otherwise id-less message
            header["messageId"] = derived_message_id(raw)
        return dumps(decorate(doc, code, description))
    return dumps(wrap_raw(raw, code, description))
