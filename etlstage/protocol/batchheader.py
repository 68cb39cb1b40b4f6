"""The header that opens each L batch of a stage with ``batch_id: true`` (docs/protocol.md:
batch ids): one message, ``HEADER`` and the batch's id in 32 lower-case hex digits. How
the id is made is :mod:`etlstage.conversation.batchid`.

>>> ident = "0123456789abcdef0123456789abcdef"
>>> header(ident, b"\\n") == HEADER + ident.encode() + b"\\n", parse_header(HEADER + ident.encode()) == ident
(True, True)
>>> markers_clash([0x0A, 0x00, 0x61])  # 'a' may be in an id
[97]
"""

from __future__ import annotations

from collections.abc import Iterable

HEADER = b"etlstage-batch-id "  # the header message: this, then the id
HEX = frozenset(b"0123456789abcdef")
ALPHABET = frozenset(HEADER) | HEX  # a stage's markers may be none of these


def header(ident: str, eom: bytes) -> bytes:
    """The header message that opens a batch on the wire."""
    return HEADER + ident.encode() + eom


def parse_header(message: bytes) -> str:
    """The id in a batch's first message; ValueError naming it when it is not a header."""
    ident = message[len(HEADER) :]
    if not message.startswith(HEADER) or len(ident) != 32 or not set(ident) <= HEX:
        raise ValueError(f"expected a batch id header ({HEADER.decode()}<32 hex digits>) first, got {message[:60]!r}")
    return ident.decode()


def markers_clash(markers: Iterable[int]) -> list[int]:
    """The stage's markers that a header could contain (a stage asking for ids may use none)."""
    return [m for m in markers if m in ALPHABET]


__all__ = ["ALPHABET", "HEADER", "header", "markers_clash", "parse_header"]
