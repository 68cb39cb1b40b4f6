"""RDSS error codes and the queue each one routes to (the contract with the Spark loader).

The loader routes every message by ``messageHeader.errorCode``: no code -> the valid table;
a code in :data:`INVALID_QUEUE_CODES` -> the Invalid Message Queue table; any other code
(GENERR005, 006, 008, 009, application codes) -> the Error Message Queue table.

>>> queue_of(None), queue_of("GENERR010"), queue_of("GENERR006")
('valid', 'invalid', 'error')
"""

from __future__ import annotations

GENERR001 = "GENERR001"  # the message body is not in the expected format
GENERR002 = "GENERR002"  # the messageType is not supported
GENERR003 = "GENERR003"  # the message had expired when delivery was attempted
GENERR004 = "GENERR004"  # invalid, missing or corrupt headers
GENERR005 = "GENERR005"  # maximum number of connection retries exceeded
GENERR006 = "GENERR006"  # an error interacting with the underlying system (here: message over the size limit)
GENERR007 = "GENERR007"  # malformed JSON
GENERR008 = "GENERR008"  # a transaction roll-back failed
GENERR009 = "GENERR009"  # an unexpected or unknown error (here: a sequence incomplete at its timeout)
GENERR010 = "GENERR010"  # an invalid or malformed UUID

DESCRIPTIONS = {
    GENERR001: "The Message Body is not in the expected format, for example mandatory fields are missing.",
    GENERR002: "The provided messageType is not supported.",
    GENERR003: "The expiration date of the Message had passed at the point at which delivery was attempted.",
    GENERR004: "Invalid, missing or corrupt headers were detected on the Message.",
    GENERR005: "Maximum number of connection retries exceeded when attempting to send the Message.",
    GENERR006: "An error occurred interacting with the underlying system.",
    GENERR007: "Malformed JSON was detected in the Message Body.",
    GENERR008: "An attempt to roll back a transaction failed.",
    GENERR009: "An unexpected or unknown error occurred.",
    GENERR010: "Received an invalid / malformed UUID.",
}

VALID, INVALID, ERROR = "valid", "invalid", "error"
INVALID_QUEUE_CODES = frozenset({GENERR001, GENERR002, GENERR003, GENERR004, GENERR007, GENERR010})
QUEUE_OF_CODE = {code: (INVALID if code in INVALID_QUEUE_CODES else ERROR) for code in DESCRIPTIONS}


def queue_of(code: str | None) -> str:
    """``valid``, ``invalid`` or ``error``: where a message with this errorCode ends up."""
    if not code:
        return VALID
    return QUEUE_OF_CODE.get(code, ERROR)
