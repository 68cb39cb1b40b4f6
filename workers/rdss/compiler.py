"""A small JSON Schema compiler: one schema in, one Python predicate ``valid(doc) -> bool`` out.

Why not only fastjsonschema: it builds an error path string for every value it visits and
freezes every array item for ``uniqueItems``, which costs most of the time on valid RDSS
messages.  This compiler emits plain ``if … : return False`` code, resolves every ``$ref`` at
compile time (local or via a ``referencing`` registry) and says nothing about *why* a
document is invalid: that is :mod:`explain`'s job, run only on rejected messages.

Supported keywords (all the RDSS schemas of 3.0.2 and 4.0.0 use): type, enum, const, required,
properties, additionalProperties, items, contains, minItems, maxItems, uniqueItems, minLength,
maxLength, minimum, maximum, pattern, format, allOf, anyOf, oneOf, not, $ref.  Any other
validation keyword raises :class:`UnsupportedSchema`, so a caller can fall back to a general
validator instead of silently ignoring a rule.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from typing import Any

import referencing
import referencing.jsonschema

Resolver = Any  # referencing's Resolver (generic, not exported at the top level)

ANNOTATIONS = frozenset(
    {"$schema", "id", "$id", "definitions", "$defs", "title", "description", "$comment", "default", "examples"}
)
_TYPE_TEST = {
    "string": "type({v}) is str",
    "object": "type({v}) is dict",
    "array": "type({v}) is list",
    "boolean": "type({v}) is bool",
    "null": "{v} is None",
    "number": "(type({v}) is int or type({v}) is float)",
}


class UnsupportedSchema(ValueError):
    """The schema uses a keyword this compiler does not implement."""


def unique(items: list[Any]) -> bool:
    """No two items serialise alike (``True`` and ``1``, ``1`` and ``1.0`` are different JSON).

    Serialising every item is slow, and short arrays are the rule: compare their pairs with ``==``
    first.  ``==`` is looser (``True == 1 == 1.0``), so no equal pair proves the items unique; only
    a pair it finds equal needs the serialised comparison.  (NaN, the one value unequal to itself,
    never reaches here: the message parser rejects it.)

    >>> unique([{"a": 1}, {"a": 2}]), unique([{"a": 1}, {"a": 1}]), unique([1, True]), unique([1, 1.0])
    (True, False, True, True)
    """
    n = len(items)
    if n < 2:
        return True
    if n <= 16 and not any(items[i] == items[j] for i in range(n - 1) for j in range(i + 1, n)):
        return True
    keys = [json.dumps(x, sort_keys=True) for x in items]
    return len(set(keys)) == len(keys)


def anchored(pattern: str) -> str:
    # JSON Schema patterns use search semantics; a trailing "$" must not accept a trailing newline.
    return pattern[:-1] + r"\Z" if pattern.endswith("$") and not pattern.endswith("\\$") else pattern


def type_test(t: str, v: str, draft4: bool) -> str:
    """The Python test that the value named ``v`` has JSON type ``t`` (draft-04: no integral floats).

    >>> type_test("integer", "x", True), type_test("string", "x", False)
    ('type(x) is int', 'type(x) is str')
    """
    if t == "integer":
        if draft4:
            return f"type({v}) is int"
        return f"(type({v}) is int or (type({v}) is float and {v}.is_integer()))"
    if t not in _TYPE_TEST:
        raise UnsupportedSchema(f"unknown type {t!r}")
    return _TYPE_TEST[t].format(v=v)


class _Compiler:
    def __init__(self, formats: Mapping[str, Callable[[object], bool]], draft4: bool):
        self.formats = formats
        self.draft4 = draft4
        self.consts: dict[str, Any] = {"_unique": unique}
        self.lines: list[str] = []
        self.names: dict[int, str] = {}  # id(schema) -> function name (refs compile once)
        self.keep: list[Any] = []  # schemas whose id() is used as a key stay alive

    def const(self, value: Any) -> str:
        name = f"_c{len(self.consts)}"
        self.consts[name] = value
        return name

    def function(self, schema: Any, resolver: Resolver) -> str:
        key = id(schema)
        if key in self.names:
            return self.names[key]
        name = f"_v{len(self.names)}"
        self.names[key] = name
        self.keep.append(schema)
        body: list[str] = []
        self.emit(schema, "d", body, "    ", resolver, 0)
        self.lines.append(f"def {name}(d):")
        self.lines.extend(body)
        self.lines.append("    return True")
        self.lines.append("")
        return name

    def emit(self, s: Any, v: str, out: list[str], ind: str, resolver: Resolver, depth: int) -> None:
        """Append statements that ``return False`` if ``v`` fails schema ``s``."""
        if s is True or s == {}:
            return
        if s is False:
            out.append(f"{ind}return False")
            return
        if not isinstance(s, dict):
            raise UnsupportedSchema(f"schema must be an object or boolean, got {s!r:.80}")
        if "$ref" in s:
            resolved = resolver.lookup(s["$ref"])
            target = self.function(resolved.contents, resolved.resolver)
            out.append(f"{ind}if not {target}({v}): return False")
            if self.draft4 or len(s.keys() - ANNOTATIONS) == 1:
                return  # draft-04/06/07: siblings of $ref are ignored
        for kw in s.keys() - ANNOTATIONS - {"$ref"}:
            if kw not in HANDLED:
                raise UnsupportedSchema(f"keyword {kw!r} is not supported by the compiler")
        t = s.get("type")
        if t is not None:
            types = [t] if isinstance(t, str) else list(t)
            out.append(f"{ind}if not ({' or '.join(type_test(x, v, self.draft4) for x in types)}): return False")
        if "enum" in s:
            values = s["enum"]
            if all(isinstance(x, str) for x in values):
                out.append(f"{ind}if type({v}) is not str or {v} not in {self.const(frozenset(values))}: return False")
            else:
                c = self.const([json.dumps(x, sort_keys=True) for x in values])
                out.append(f"{ind}if _json_dumps({v}, sort_keys=True) not in {c}: return False")
                self.consts["_json_dumps"] = json.dumps
        if "const" in s:
            c = self.const(json.dumps(s["const"], sort_keys=True))
            self.consts["_json_dumps"] = json.dumps
            out.append(f"{ind}if _json_dumps({v}, sort_keys=True) != {c}: return False")
        self.emit_string(s, v, out, ind)
        self.emit_number(s, v, out, ind)
        self.emit_object(s, v, out, ind, resolver, depth)
        self.emit_array(s, v, out, ind, resolver, depth)
        for sub in s.get("allOf", ()):
            self.emit(sub, v, out, ind, resolver, depth)
        for kw, test in (("anyOf", "any"), ("oneOf", "one")):
            if kw in s:
                names = [self.function(sub, resolver) for sub in s[kw]]
                calls = ", ".join(f"{n}({v})" for n in names)
                if test == "any":
                    out.append(f"{ind}if not ({' or '.join(f'{n}({v})' for n in names)}): return False")
                else:
                    out.append(f"{ind}if [{calls}].count(True) != 1: return False")
        if "not" in s:
            out.append(f"{ind}if {self.function(s['not'], resolver)}({v}): return False")

    def emit_string(self, s: dict[str, Any], v: str, out: list[str], ind: str) -> None:
        checks = []
        if "minLength" in s:
            checks.append(f"len({v}) < {int(s['minLength'])}")
        if "maxLength" in s:
            checks.append(f"len({v}) > {int(s['maxLength'])}")
        if "pattern" in s:
            checks.append(f"{self.const(re.compile(anchored(s['pattern'])).search)}({v}) is None")
        if "format" in s and s["format"] in self.formats:
            checks.append(f"not {self.const(self.formats[s['format']])}({v})")
        if checks:
            out.append(f"{ind}if type({v}) is str and ({' or '.join(checks)}): return False")

    def emit_number(self, s: dict[str, Any], v: str, out: list[str], ind: str) -> None:
        checks = []
        if "minimum" in s:
            checks.append(f"{v} < {s['minimum']!r}")
        if "maximum" in s:
            checks.append(f"{v} > {s['maximum']!r}")
        if checks:
            is_number = f"(type({v}) is int or type({v}) is float)"
            out.append(f"{ind}if {is_number} and ({' or '.join(checks)}): return False")

    def emit_object(self, s: dict[str, Any], v: str, out: list[str], ind: str, resolver: Any, depth: int) -> None:
        props = s.get("properties", {})
        required = s.get("required", ())
        extra = s.get("additionalProperties", True)
        if not (props or required or extra is not True):
            return
        out.append(f"{ind}if type({v}) is dict:")
        inner = ind + "    "
        out.append(f"{inner}pass")
        if required:
            out.append(f"{inner}if not {self.const(frozenset(required))} <= {v}.keys(): return False")
        if extra is False:
            out.append(f"{inner}if not {v}.keys() <= {self.const(frozenset(props))}: return False")
        elif extra is not True:
            fn = self.function(extra, resolver)
            allowed = self.const(frozenset(props))
            out.append(f"{inner}for _k in {v}.keys() - {allowed}:")
            out.append(f"{inner}    if not {fn}({v}[_k]): return False")
        for i, (name, sub) in enumerate(props.items()):
            if sub is True or sub == {}:
                continue
            w = f"p{depth}_{i}"
            out.append(f"{inner}{w} = {v}.get({name!r}, _MISSING)")
            out.append(f"{inner}if {w} is not _MISSING:")
            self.emit_inline_or_call(sub, w, out, inner + "    ", resolver, depth + 1)

    def emit_array(self, s: dict[str, Any], v: str, out: list[str], ind: str, resolver: Any, depth: int) -> None:
        keys = {"items", "minItems", "maxItems", "uniqueItems", "contains"} & s.keys()
        if not keys:
            return
        out.append(f"{ind}if type({v}) is list:")
        inner = ind + "    "
        out.append(f"{inner}pass")
        if "minItems" in s:
            out.append(f"{inner}if len({v}) < {int(s['minItems'])}: return False")
        if "maxItems" in s:
            out.append(f"{inner}if len({v}) > {int(s['maxItems'])}: return False")
        if s.get("uniqueItems"):
            out.append(f"{inner}if len({v}) > 1 and not _unique({v}): return False")
        items = s.get("items")
        if isinstance(items, list):
            for i, sub in enumerate(items):
                w = f"t{depth}_{i}"
                out.append(f"{inner}if len({v}) > {i}:")
                out.append(f"{inner}    {w} = {v}[{i}]")
                self.emit_inline_or_call(sub, w, out, inner + "    ", resolver, depth + 1)
        elif items is not None and items is not True and items != {}:
            w = f"i{depth}"
            out.append(f"{inner}for {w} in {v}:")
            self.emit_inline_or_call(items, w, out, inner + "    ", resolver, depth + 1)
        if "contains" in s:
            fn = self.function(s["contains"], resolver)
            out.append(f"{inner}if not any({fn}(_x) for _x in {v}): return False")

    def emit_inline_or_call(self, sub: Any, w: str, out: list[str], ind: str, resolver: Any, depth: int) -> None:
        # Small leaf schemas are inlined; anything with structure becomes (or reuses) a function.
        if (
            isinstance(sub, dict)
            and "$ref" not in sub
            and not ({"properties", "items", "anyOf", "allOf", "oneOf"} & sub.keys())
        ):
            before = len(out)
            self.emit(sub, w, out, ind, resolver, depth)
            if len(out) == before:
                out.append(f"{ind}pass")
            return
        if isinstance(sub, dict) and set(sub) == {"$ref"}:
            resolved = resolver.lookup(sub["$ref"])
            target = resolved.contents
            if (
                isinstance(target, dict)
                and "$ref" not in target
                and not ({"properties", "items", "anyOf", "allOf", "oneOf"} & target.keys())
            ):
                before = len(out)
                self.emit(target, w, out, ind, resolved.resolver, depth)
                if len(out) == before:
                    out.append(f"{ind}pass")
                return
        out.append(f"{ind}if not {self.function(sub, resolver)}({w}): return False")


HANDLED = frozenset(
    {
        "type",
        "enum",
        "const",
        "required",
        "properties",
        "additionalProperties",
        "items",
        "contains",
        "minItems",
        "maxItems",
        "uniqueItems",
        "minLength",
        "maxLength",
        "minimum",
        "maximum",
        "pattern",
        "format",
        "allOf",
        "anyOf",
        "oneOf",
        "not",
    }
)


def root_resolver(schema: Mapping[str, Any], registry: referencing.Registry | None, draft4: bool) -> Resolver:
    """A resolver of ``schema``'s references: local ones against ``schema``, others through ``registry``."""
    spec = referencing.jsonschema.DRAFT4 if draft4 else referencing.jsonschema.DRAFT7
    resource = referencing.Resource.from_contents(schema, default_specification=spec)
    registry = (registry or referencing.Registry()).with_resource("urn:etlstage:root", resource)
    return registry.resolver_with_root(resource)


def compile_schema(
    schema: Mapping[str, Any],
    *,
    registry: referencing.Registry | None = None,
    formats: Mapping[str, Callable[[object], bool]] | None = None,
    draft4: bool = False,
) -> Callable[[Any], bool]:
    """``valid(doc)``: True when ``doc`` satisfies ``schema`` (refs resolved through ``registry``).

    >>> valid = compile_schema({"type": "object", "required": ["a"], "properties": {"a": {"type": "integer"}}})
    >>> valid({"a": 1}), valid({"a": "1"}), valid({})
    (True, False, False)
    """
    resolver = root_resolver(schema, registry, draft4)
    compiler = _Compiler(formats or {}, draft4)
    entry = compiler.function(schema, resolver)
    source = "\n".join(compiler.lines)
    namespace: dict[str, Any] = dict(compiler.consts, _MISSING=object())
    exec(compile(source, "<rdss-compiled-schema>", "exec"), namespace)
    fn = namespace[entry]
    fn.__source__ = source
    return fn
