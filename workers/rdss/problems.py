"""Every problem a schema finds in a document, compiled: the errors jsonschema's ``iter_errors`` yields.

:mod:`compiler` answers "valid or not" and stops at the first failure.  A rejected message then
needs *every* problem (:mod:`explain` names the first of the winning error code and counts the
others).  jsonschema finds them, but slowly: it walks the schema per message through generic
keyword functions and builds an error object per failed keyword and alternative.  This module
compiles the same walk into plain Python, one function per schema node, that records a
:class:`Problem` — the attributes :mod:`explain` reads from a ``jsonschema.ValidationError`` —
only where a keyword fails.

What it reproduces of jsonschema (drafts 4 to 7, the drafts of the RDSS schemas): keywords
are checked in the schema's own order; ``$ref`` resolves at compile time (its siblings, which
the RDSS schemas never have, are treated as the predicate compiler treats them); ``required``
fails once per missing name; ``additionalProperties: false`` once for all extra names;
``anyOf``/``oneOf`` keep the problems of every alternative tried, tagged with the
alternative's index, as jsonschema's ``context``.  Values are tested exactly as the compiled
predicate tests them (the same type tests, anchored patterns and format functions), so a
message the predicate rejects always has a problem here.  A problem that only jsonschema's own
message text could describe (``const``, ``contains``, ``not``, ``maxItems``, ``maxLength``, a
``false`` schema, ``oneOf`` matching twice) raises :class:`Unnamed` when that text is read, and
the caller falls back to jsonschema.  A keyword outside :data:`compiler.HANDLED` raises
:class:`~compiler.UnsupportedSchema` at compile time, as the predicate compiler does.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from typing import Any

import referencing
from etlstage_workers.rdss.compiler import (
    ANNOTATIONS,
    HANDLED,
    UnsupportedSchema,
    anchored,
    root_resolver,
    type_test,
    unique,
)

# Keywords whose schema holds subschemas: a node with any of them becomes a function of its own.
_STRUCTURE = frozenset({"$ref", "properties", "items", "anyOf", "allOf", "oneOf", "not", "contains"})


class Unnamed(LookupError):
    """A problem :func:`explain.describe` would describe by jsonschema's message text, which we do not build."""


class Problem:
    """One failed keyword: the attributes of a ``jsonschema.ValidationError`` that :mod:`explain` reads."""

    __slots__ = ("absolute_path", "context", "instance", "schema", "schema_path", "validator", "validator_value")

    def __init__(
        self,
        path: tuple[Any, ...],
        keyword: str | None,
        value: Any,
        instance: Any,
        schema: Any,
        context: list[Problem] | None = None,
    ) -> None:
        self.absolute_path = path
        self.validator = keyword
        self.validator_value = value
        self.instance = instance
        self.schema = schema
        self.context = context or []
        self.schema_path: tuple[Any, ...] = ()  # inside an anyOf/oneOf: (index of the alternative,)

    @property
    def message(self) -> str:
        raise Unnamed(self.validator)

    def __repr__(self) -> str:
        return f"Problem({list(self.absolute_path)!r}, {self.validator!r}, {self.validator_value!r:.60})"


ProblemFinder = Callable[[Any], list[Problem]]
_Node = Callable[[Any, tuple[Any, ...], list[Problem]], None]


def _valid(node: _Node, instance: Any) -> bool:
    found: list[Problem] = []
    node(instance, (), found)
    return not found


def _alternatives(
    nodes: list[_Node], instance: Any, path: tuple[Any, ...], out: list[Problem], keyword: str, value: Any, schema: Any
) -> None:
    """anyOf/oneOf: the problems of each alternative tried, up to the first that has none."""
    context: list[Problem] = []
    for index, node in enumerate(nodes):
        found: list[Problem] = []
        node(instance, path, found)
        if not found:
            if keyword == "oneOf" and any(_valid(other, instance) for other in nodes[index + 1 :]):
                out.append(Problem(path, keyword, value, instance, schema))  # valid under several
            return
        for problem in found:
            problem.schema_path = (index,)
        context.extend(found)
    out.append(Problem(path, keyword, value, instance, schema, context))


class _ProblemCompiler:
    def __init__(self, formats: Mapping[str, Callable[[object], bool]], draft4: bool) -> None:
        self.formats = formats
        self.draft4 = draft4
        self.consts: dict[str, Any] = {
            "_P": Problem,
            "_unique": unique,
            "_valid": _valid,
            "_alternatives": _alternatives,
            "_json_dumps": json.dumps,
        }
        self.const_ids: dict[int, str] = {}
        self.lines: list[str] = []
        self.names: dict[int, str] = {}  # id(schema) -> function name (a $ref target compiles once)
        self.keep: list[Any] = []  # schemas whose id() is a key stay alive

    def const(self, value: Any) -> str:
        name = self.const_ids.get(id(value))
        if name is None:
            name = self.const_ids[id(value)] = f"_c{len(self.consts)}"
            self.consts[name] = value
            self.keep.append(value)
        return name

    def function(self, schema: Any, resolver: Any) -> str:
        key = id(schema)
        if key in self.names:
            return self.names[key]
        name = self.names[key] = f"_n{len(self.names)}"
        self.keep.append(schema)
        body: list[str] = []
        self.emit(schema, "d", "p", body, "    ", resolver, 0)
        self.lines.append(f"def {name}(d, p, e):")
        self.lines.extend(body or ["    pass"])
        self.lines.append("")
        return name

    def emit(self, s: Any, v: str, p: str, out: list[str], ind: str, resolver: Any, depth: int) -> None:
        """Statements appending to ``e`` a Problem for each keyword of ``s`` that ``v`` (at path ``p``) fails."""
        if s is True or s == {}:
            return
        if s is False:
            out.append(f"{ind}e.append(_P({p}, None, None, {v}, False))")
            return
        if not isinstance(s, dict):
            raise UnsupportedSchema(f"schema must be an object or boolean, got {s!r:.80}")
        if "$ref" in s:
            resolved = resolver.lookup(s["$ref"])
            target, target_resolver = resolved.contents, resolved.resolver
            if _is_leaf(target):
                self.emit(target, v, p, out, ind, target_resolver, depth)
            else:
                out.append(f"{ind}{self.function(target, target_resolver)}({v}, {p}, e)")
            if self.draft4 or len(s.keys() - ANNOTATIONS) == 1:
                return  # siblings of $ref: ignored or checked exactly as the predicate compiler does
        for kw in s.keys() - ANNOTATIONS - {"$ref"}:
            if kw not in HANDLED:
                raise UnsupportedSchema(f"keyword {kw!r} is not supported by the compiler")
        for kw, value in s.items():
            if kw in ANNOTATIONS or kw == "$ref":
                continue
            add = f"e.append(_P({p}, {kw!r}, {self.const(value)}, {v}, {self.const(s)}))"
            keyword = getattr(self, "kw_" + kw, None)
            if keyword is not None:
                keyword(s, value, v, p, add, out, ind, resolver, depth)
            else:
                out.append(f"{ind}if {self.failed(kw, value, v)}: {add}")

    def failed(self, kw: str, value: Any, v: str) -> str:
        """The condition under which ``v`` fails a keyword that looks at ``v`` alone."""
        if kw == "type":
            types = [value] if isinstance(value, str) else list(value)
            return f"not ({' or '.join(type_test(t, v, self.draft4) for t in types)})"
        if kw == "enum":
            if all(isinstance(x, str) for x in value):
                return f"(type({v}) is not str or {v} not in {self.const(frozenset(value))})"
            encoded = self.const([json.dumps(x, sort_keys=True) for x in value])
            return f"_json_dumps({v}, sort_keys=True) not in {encoded}"
        if kw == "const":
            return f"_json_dumps({v}, sort_keys=True) != {self.const(json.dumps(value, sort_keys=True))}"
        is_number = f"(type({v}) is int or type({v}) is float)"
        limits = {
            "minLength": f"type({v}) is str and len({v}) < {int(value) if isinstance(value, int) else 0}",
            "maxLength": f"type({v}) is str and len({v}) > {int(value) if isinstance(value, int) else 0}",
            "minItems": f"type({v}) is list and len({v}) < {int(value) if isinstance(value, int) else 0}",
            "maxItems": f"type({v}) is list and len({v}) > {int(value) if isinstance(value, int) else 0}",
            "minimum": f"{is_number} and {v} < {value!r}",
            "maximum": f"{is_number} and {v} > {value!r}",
        }
        if kw in limits:
            return limits[kw]
        if kw == "uniqueItems":
            return f"type({v}) is list and len({v}) > 1 and not _unique({v})" if value else "False"
        if kw == "pattern":
            return f"type({v}) is str and {self.const(re.compile(anchored(value)).search)}({v}) is None"
        if kw == "format":
            check = self.formats.get(value)
            return f"type({v}) is str and not {self.const(check)}({v})" if check else "False"
        raise UnsupportedSchema(f"keyword {kw!r} is not supported by the compiler")

    # -- keywords with subschemas or a loop ----------------------------------------------
    def kw_required(self, s: Any, value: Any, v: str, p: str, add: str, out: list[str], ind: str, *_: Any) -> None:
        if value:
            out.append(f"{ind}if type({v}) is dict:")
            out.append(f"{ind}    for _name in {self.const(list(value))}:")
            out.append(f"{ind}        if _name not in {v}: {add}")

    def kw_properties(
        self, s: Any, value: Any, v: str, p: str, add: str, out: list[str], ind: str, resolver: Any, depth: int
    ) -> None:
        inner: list[str] = []
        for i, (name, sub) in enumerate(value.items()):
            if sub is True or sub == {}:
                continue
            w = f"p{depth}_{i}"
            body: list[str] = []
            self.sub(sub, w, f"{p} + ({name!r},)", body, ind + "        ", resolver, depth + 1)
            if body:
                inner.append(f"{ind}    {w} = {v}.get({name!r}, _MISSING)")
                inner.append(f"{ind}    if {w} is not _MISSING:")
                inner.extend(body)
        if inner:
            out.append(f"{ind}if type({v}) is dict:")
            out.extend(inner)

    def kw_additionalProperties(
        self, s: Any, value: Any, v: str, p: str, add: str, out: list[str], ind: str, resolver: Any, depth: int
    ) -> None:
        allowed = self.const(frozenset(s.get("properties", {})))
        if value is False:
            out.append(f"{ind}if type({v}) is dict and not {v}.keys() <= {allowed}: {add}")
        elif value is not True and value != {}:
            k = f"k{depth}"
            out.append(f"{ind}if type({v}) is dict:")
            out.append(f"{ind}    for {k} in {v}.keys() - {allowed}:")
            out.append(f"{ind}        {self.function(value, resolver)}({v}[{k}], {p} + ({k},), e)")

    def kw_items(
        self, s: Any, value: Any, v: str, p: str, add: str, out: list[str], ind: str, resolver: Any, depth: int
    ) -> None:
        if value is True or value == {}:
            return
        w, i = f"x{depth}", f"i{depth}"
        if isinstance(value, list):
            out.append(f"{ind}if type({v}) is list:")
            out.append(f"{ind}    pass")
            for index, sub in enumerate(value):
                out.append(f"{ind}    if len({v}) > {index}:")
                out.append(f"{ind}        {w} = {v}[{index}]")
                self.sub(sub, w, f"{p} + ({index},)", out, ind + "        ", resolver, depth + 1)
            return
        if not isinstance(value, dict):
            raise UnsupportedSchema(f"items: {value!r:.80} is not supported by the compiler")
        out.append(f"{ind}if type({v}) is list:")
        out.append(f"{ind}    for {i}, {w} in enumerate({v}):")
        before = len(out)
        self.sub(value, w, f"{p} + ({i},)", out, ind + "        ", resolver, depth + 1)
        if len(out) == before:
            out.append(f"{ind}        pass")

    def kw_contains(
        self, s: Any, value: Any, v: str, p: str, add: str, out: list[str], ind: str, resolver: Any, depth: int
    ) -> None:
        fn = self.function(value, resolver)
        out.append(f"{ind}if type({v}) is list and not any(_valid({fn}, _x) for _x in {v}): {add}")

    def kw_allOf(
        self, s: Any, value: Any, v: str, p: str, add: str, out: list[str], ind: str, resolver: Any, depth: int
    ) -> None:
        for sub in value:
            self.sub(sub, v, p, out, ind, resolver, depth)

    def kw_anyOf(
        self, s: Any, value: Any, v: str, p: str, add: str, out: list[str], ind: str, resolver: Any, depth: int
    ) -> None:
        nodes = ", ".join(self.function(sub, resolver) for sub in value)
        out.append(f"{ind}_alternatives([{nodes}], {v}, {p}, e, 'anyOf', {self.const(value)}, {self.const(s)})")

    def kw_oneOf(
        self, s: Any, value: Any, v: str, p: str, add: str, out: list[str], ind: str, resolver: Any, depth: int
    ) -> None:
        nodes = ", ".join(self.function(sub, resolver) for sub in value)
        out.append(f"{ind}_alternatives([{nodes}], {v}, {p}, e, 'oneOf', {self.const(value)}, {self.const(s)})")

    def kw_not(
        self, s: Any, value: Any, v: str, p: str, add: str, out: list[str], ind: str, resolver: Any, depth: int
    ) -> None:
        out.append(f"{ind}if _valid({self.function(value, resolver)}, {v}): {add}")

    def sub(self, sub: Any, v: str, p: str, out: list[str], ind: str, resolver: Any, depth: int) -> None:
        """A subschema: inlined when it is a leaf, else a call of its function."""
        if _is_leaf(sub):
            self.emit(sub, v, p, out, ind, resolver, depth)
        elif isinstance(sub, dict) and set(sub) == {"$ref"}:
            self.emit(sub, v, p, out, ind, resolver, depth)  # emit() inlines a leaf target or calls it
        else:
            out.append(f"{ind}{self.function(sub, resolver)}({v}, {p}, e)")


def _is_leaf(schema: Any) -> bool:
    if not isinstance(schema, dict) or _STRUCTURE & schema.keys():
        return False
    extra = schema.get("additionalProperties", False)
    return isinstance(extra, bool) or extra == {}


def compile_problems(
    schema: Mapping[str, Any],
    *,
    registry: referencing.Registry | None = None,
    formats: Mapping[str, Callable[[object], bool]] | None = None,
    draft4: bool = False,
) -> ProblemFinder:
    """``problems(doc)``: every :class:`Problem` ``schema`` finds in ``doc``, in jsonschema's order.

    >>> schema = {"type": "object", "required": ["a", "b"], "properties": {"a": {"type": "integer"}}}
    >>> problems = compile_problems(schema)
    >>> [(list(x.absolute_path), x.validator) for x in problems({"a": "1"})]
    [([], 'required'), (['a'], 'type')]
    """
    compiler = _ProblemCompiler(formats or {}, draft4)
    entry = compiler.function(schema, root_resolver(schema, registry, draft4))
    namespace: dict[str, Any] = dict(compiler.consts, _MISSING=object())
    exec(compile("\n".join(compiler.lines), "<rdss-compiled-problems>", "exec"), namespace)
    node = namespace[entry]

    def problems(doc: Any) -> list[Problem]:
        found: list[Problem] = []
        node(doc, (), found)
        return found

    problems.__source__ = "\n".join(compiler.lines)  # type: ignore[attr-defined]
    problems.keep = compiler.keep  # type: ignore[attr-defined]  # the schemas behind the id() keys
    return problems
