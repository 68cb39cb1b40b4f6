"""RDSS routing: which table (valid / invalid / error) a message belongs to.

The contract agreed with the RDSS transformer: messages are compact JSON objects with
``messageHeader`` and ``messageBody``; the route follows ``messageHeader.errorCode``.
This is the loader's own copy of the code table (workers never import each other).

>>> route_of(None), route_of("GENERR001"), route_of("GENERR009"), route_of("XYZ")
('valid', 'invalid', 'error', 'error')
"""

from __future__ import annotations

VALID, INVALID, ERROR = "valid", "invalid", "error"

# Invalid Message Queue: the message itself is wrong (format, type, expiry, headers, JSON, UUID).
INVALID_CODES = frozenset({"GENERR001", "GENERR002", "GENERR003", "GENERR004", "GENERR007", "GENERR010"})
# Everything else — GENERR005, 006, 008, 009 and unknown codes — goes to the Error Message Queue.

NOT_JSON = "GENERR007"
KEY_POINTER = "/messageHeader/messageId"

# Output columns of an RDSS table: name, JSON pointer into the message, Spark type.
# ``body`` holds the JSON text of messageBody; ``raw`` the message as received.
COLUMNS: tuple[tuple[str, str, str], ...] = (
    ("messageId", "/messageHeader/messageId", "string"),
    ("messageClass", "/messageHeader/messageClass", "string"),
    ("messageType", "/messageHeader/messageType", "string"),
    ("sequence", "/messageHeader/messageSequence/sequence", "string"),
    ("position", "/messageHeader/messageSequence/position", "long"),
    ("publishedTimestamp", "/messageHeader/messageTimings/publishedTimestamp", "string"),
    ("version", "/messageHeader/version", "string"),
    ("generator", "/messageHeader/generator", "string"),
    ("errorCode", "/messageHeader/errorCode", "string"),
    ("errorDescription", "/messageHeader/errorDescription", "string"),
    ("body", "/messageBody", "string"),
)


def route_of(error_code: object) -> str:
    """The table for a message whose ``messageHeader.errorCode`` is ``error_code``."""
    if error_code is None:
        return VALID
    if isinstance(error_code, str) and error_code in INVALID_CODES:
        return INVALID
    return ERROR
