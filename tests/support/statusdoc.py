"""The fields of a status document against their declaration in :mod:`etlstage.observe.document`."""

from __future__ import annotations

import types
from typing import Any, NotRequired, Union, get_args, get_origin, get_type_hints, is_typeddict


def _unwrap(t: Any) -> Any:
    """``NotRequired[X]`` and ``X | None`` -> ``X``."""
    if get_origin(t) is NotRequired:
        t = get_args(t)[0]
    if get_origin(t) in (Union, types.UnionType):
        rest = [a for a in get_args(t) if a is not type(None)]
        t = rest[0] if len(rest) == 1 else t
    return t


def _items(t: Any, value: object) -> tuple[Any, list[object]]:
    """The declared type of the records inside ``value`` and the records, if it holds any."""
    if is_typeddict(t):
        return t, [value]
    origin, args = get_origin(t), get_args(t)
    if origin is list and args and is_typeddict(args[0]) and isinstance(value, list):
        return args[0], value
    if origin is dict and len(args) == 2 and is_typeddict(args[1]) and isinstance(value, dict):
        return args[1], list(value.values())  # keyed by names (stages): each has the same fields
    return None, []


def compare(doc: object, declared: Any, prefix: str = "") -> tuple[set[str], set[str]]:
    """``(missing, undeclared)`` dotted paths of ``doc`` against the TypedDict ``declared``;
    the records of a list or of ``stages`` share a path; those of an empty list are not looked for."""
    missing: set[str] = set()
    undeclared: set[str] = set()
    assert isinstance(doc, dict), (prefix, doc)
    hints = get_type_hints(declared, include_extras=True)
    undeclared |= {prefix + k for k in doc.keys() - hints.keys()}
    for key, hint in hints.items():
        path = prefix + key
        if key not in doc:
            missing.add(path)
            continue
        inner, records = _items(_unwrap(hint), doc[key])
        for record in records:
            if record is not None:
                m, u = compare(record, inner, path + ".")
                missing |= m
                undeclared |= u
    return missing, undeclared
