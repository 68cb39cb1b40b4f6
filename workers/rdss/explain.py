"""Why a message failed its schema: every problem, the spec error code, one precise sentence.

Run only on messages the compiled validator rejected, over the problems found by
:mod:`problems` (compiled) or, for what that cannot name, by jsonschema: both give errors with
the same attributes (``absolute_path``, ``validator``, ``validator_value``, ``instance``,
``schema``, ``context``, ``schema_path``, ``message``).  The code is chosen by precedence:
an invalid UUID anywhere (GENERR010: the spec says such a message MUST get that code) before
header problems (GENERR004) before an unsupported messageType (GENERR002) before body
problems (GENERR001).  Timestamps count as header problems in the header and body problems
in the body.  The description names the first problem of the winning code, then how many
other problems were found.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, Protocol

import jsonschema
from etlstage_workers.rdss.codes import GENERR001, GENERR002, GENERR004, GENERR010
from etlstage_workers.rdss.formats import TIMESTAMP_EXPECTED, TIMESTAMP_FORMATS, UUID_EXPECTED, UUID_PATTERN


class SchemaError(Protocol):
    """What a ``jsonschema.ValidationError`` and a :class:`problems.Problem` both offer."""

    validator: Any
    validator_value: Any
    instance: Any
    schema: Any

    @property
    def absolute_path(self) -> Iterable[Any]: ...
    @property
    def context(self) -> Any: ...
    @property
    def schema_path(self) -> Any: ...
    @property
    def message(self) -> str: ...


_PRECEDENCE = (GENERR010, GENERR004, GENERR002, GENERR001)
_JSON_TYPES = {dict: "object", list: "array", str: "string", int: "integer", float: "number", bool: "boolean"}


def location(path: Iterable[Any]) -> str:
    """``messageHeader.messageHistory[0].timestamp`` style; ``message`` for the top level.

    >>> location(["messageBody", "objectFile", 0, "fileUuid"])
    'messageBody.objectFile[0].fileUuid'
    """
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text or "message"


def short(value: Any, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _leaves(errors: Iterable[SchemaError]) -> list[SchemaError]:
    """anyOf/oneOf failures replaced by the problems of their closest alternative."""
    out: list[SchemaError] = []
    for error in errors:
        if error.context and error.validator in ("anyOf", "oneOf"):
            branches: dict[Any, list[SchemaError]] = {}
            for sub in error.context:
                branches.setdefault(sub.schema_path[0] if sub.schema_path else 0, []).append(sub)
            best = min(branches.values(), key=len)
            out.extend(_leaves(best))
        else:
            out.append(error)
    return out


def code_of(error: SchemaError) -> str:
    path = list(error.absolute_path)
    if error.validator == "pattern" and error.validator_value == UUID_PATTERN:
        return GENERR010
    if not path:  # the envelope itself
        body_missing = error.validator == "required" and "messageBody" in error.validator_value
        if body_missing and isinstance(error.instance, dict) and "messageHeader" in error.instance:
            return GENERR001
        return GENERR004
    if path[0] == "messageHeader":
        if path == ["messageHeader", "messageType"] and error.validator == "enum" and isinstance(error.instance, str):
            return GENERR002
        return GENERR004
    return GENERR001


def describe(error: SchemaError) -> str:
    where = location(error.absolute_path)
    v, value = error.validator, error.instance
    if v == "required" and isinstance(value, dict):
        missing = [name for name in error.validator_value if name not in value]
        return f"{where}: missing required field{'s' if len(missing) > 1 else ''} {', '.join(map(repr, missing))}"
    if v == "additionalProperties" and isinstance(value, dict):
        allowed = list(error.schema.get("properties", {}))
        extra = [name for name in value if name not in allowed]
        plural = "s" if len(extra) > 1 else ""
        return f"{where}: unexpected field{plural} {', '.join(map(repr, extra))} (allowed: {', '.join(allowed)})"
    if v == "pattern" and error.validator_value == UUID_PATTERN:
        return f"{where}: {short(value)} is not a valid UUID (expected {UUID_EXPECTED})"
    if v == "format" and error.validator_value in TIMESTAMP_FORMATS:
        return f"{where}: {short(value)} is not a valid timestamp (expected {TIMESTAMP_EXPECTED})"
    if v == "format":
        return f"{where}: {short(value)} is not a valid {error.validator_value}"
    if v == "type":
        expected = error.validator_value
        got = _JSON_TYPES.get(type(value), "null" if value is None else type(value).__name__)
        wanted = expected if isinstance(expected, str) else " or ".join(expected)
        return f"{where}: expected {wanted}, got {got} {short(value, 60)}"
    if v == "enum":
        return f"{where}: {short(value)} is not one of {', '.join(map(repr, error.validator_value))}"
    if v in ("minimum", "maximum"):
        bound = "at least" if v == "minimum" else "at most"
        return f"{where}: {short(value)} is out of range (expected {bound} {error.validator_value})"
    if v == "minItems":
        return f"{where}: has {len(value)} item(s), expected at least {error.validator_value}"
    if v == "minLength":
        return f"{where}: {short(value)} is too short (expected at least {error.validator_value} character(s))"
    if v == "uniqueItems":
        return f"{where}: contains duplicate items (expected unique items)"
    if v == "pattern":
        return f"{where}: {short(value)} does not match the pattern {error.validator_value!r}"
    return f"{where}: {error.message[:200]}"


def explain(validator: jsonschema.protocols.Validator, doc: Any) -> tuple[str, str] | None:
    """``(code, description)`` of the problems ``validator`` finds in ``doc``; None if it finds none."""
    return explain_errors(validator.iter_errors(doc))


def explain_errors(errors: Iterable[SchemaError]) -> tuple[str, str] | None:
    """``(code, description)`` of a schema's errors (each anyOf/oneOf as its closest alternative); None if none.

    Reading ``message`` of a :class:`problems.Problem` raises :class:`problems.Unnamed`: the caller
    then asks jsonschema.
    """
    leaves = _leaves(errors)
    if not leaves:
        return None
    return pick(leaves)


def pick(errors: Sequence[SchemaError]) -> tuple[str, str]:
    by_code: dict[str, list[SchemaError]] = {}
    for error in errors:
        by_code.setdefault(code_of(error), []).append(error)
    code = next(c for c in _PRECEDENCE if c in by_code)
    first = min(by_code[code], key=lambda e: [str(p) for p in e.absolute_path])
    text = describe(first)
    others = len(errors) - 1
    if others:
        text += f" (and {others} other problem{'s' if others > 1 else ''})"
    return code, text
