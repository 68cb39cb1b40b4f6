"""The compiled problem lister explains a rejected message exactly as jsonschema does.

Each test compares ``explain_errors(problem_finder(key)(doc))`` (the compiled path the worker
takes) with ``explain(jsonschema validator, doc)`` (the path it replaced): the same error code
and the same description, word for word, including the "(and N other problems)" count.
"""

from __future__ import annotations

import json
import random
import re
from typing import Any

import pytest
from etlstage_workers.rdss.demo import generate
from etlstage_workers.rdss.explain import explain, explain_errors
from etlstage_workers.rdss.problems import Unnamed, compile_problems
from etlstage_workers.rdss.schemas import SchemaSet, load_schema_set
from etlstage_workers.rdss.validate import MessageValidator

from .test_schemas import _key, examples_302, examples_400, mutations


def _both(s: SchemaSet, key: str, doc: Any) -> tuple[Any, Any]:
    finder = s.problem_finder(key)
    assert finder is not None, f"schema {key} did not compile"
    return explain_errors(finder(doc)), explain(s.explain[key], doc)


@pytest.mark.slow  # over 10 s
@pytest.mark.parametrize("spec", ["3.0.2", "4.0.0"])
@pytest.mark.parametrize("origin", ["own", "official"])
def test_reference_messages_and_their_mutations_are_explained_as_jsonschema_does(
    sets: dict[str, Any], spec: str, origin: str
) -> None:
    s = sets[f"{origin}-{spec}"]
    rng = random.Random(22)
    examples = examples_302() if spec == "3.0.2" else examples_400()
    compared = invalid = 0
    for _name, doc in examples:
        if doc["messageHeader"]["messageType"] not in s.message_types:
            continue
        key = _key(doc, spec)
        assert _both(s, key, doc) == (None, None)  # the reference messages themselves are valid
        for m in mutations(doc, rng, 120):
            for k in (key, "any", "part"):  # the schema the header names, and the two envelope schemas
                fast, reference = _both(s, k, m)
                assert fast == reference, f"{k}: {json.dumps(m)[:400]}"
                compared += 1
                invalid += reference is not None
    assert compared > 1000 and invalid > 500


@pytest.fixture(scope="module")
def sets() -> dict[str, Any]:
    from .test_schemas import _Sets

    return _Sets()


AT_DELIVERY = re.compile(r"at delivery \([^)]*\)")


def test_the_demo_invalid_mix_gets_the_same_code_and_description() -> None:
    records, expected = generate(3000, seed=5)
    compiled = MessageValidator(load_schema_set("3.0.2"))
    jsonschema_only = MessageValidator(load_schema_set("3.0.2"))
    jsonschema_only.schemas.problems = dict.fromkeys(jsonschema_only.schemas.roots)  # no compiled lister
    codes: dict[str, int] = {}
    for raw in records:
        fast, reference = compiled.check(raw), jsonschema_only.check(raw)
        # each check reads the clock for "had passed at delivery (...)": a second may tick between them
        same = [(r.code, AT_DELIVERY.sub("at delivery (now)", r.description or "")) for r in (fast, reference)]
        assert same[0] == same[1], raw[:300]
        if fast.code is not None:
            codes[fast.code] = codes.get(fast.code, 0) + 1
    # Every kind of rejection the demo makes was compared, as often as the demo makes it (or more: re-deliveries).
    for code, n in expected["counts"]["per_error_code"].items():
        assert codes.get(code, 0) >= n, code


ZOO: dict[str, Any] = {
    "$schema": "http://json-schema.org/draft-07/schema#",
    "definitions": {"n": {"type": "integer", "minimum": 1, "maximum": 9}},
    "type": "object",
    "required": ["id", "tags", "pick"],
    "additionalProperties": False,
    "properties": {
        "id": {"type": "string", "pattern": "^[a-f]{4}$", "minLength": 4},
        "tags": {"type": "array", "minItems": 1, "uniqueItems": True, "items": {"enum": ["a", "b", 3]}},
        "pick": {"anyOf": [{"type": "string", "format": "rdss-timestamp"}, {"$ref": "#/definitions/n"}]},
        "one": {"oneOf": [{"type": "integer"}, {"type": "number", "minimum": 100}]},
        "pair": {"type": "array", "items": [{"type": "string"}, {"$ref": "#/definitions/n"}]},
        "more": {"type": "object", "additionalProperties": {"type": "boolean"}, "properties": {"x": {}}},
        "all": {"allOf": [{"type": "object", "required": ["a"]}, {"required": ["b"]}]},
    },
}
ZOO_DOCS: list[Any] = [
    {"id": "abcd", "tags": ["a"], "pick": 3},
    {"id": "ABCD", "tags": ["a", "a", 4], "pick": 0, "extra": 1, "other": 2},
    {"id": "ab", "tags": [], "pick": "2004-08-01"},
    {"tags": "a", "pick": "2004-08-01T10:00:00Z", "one": 150, "pair": [1, 10, "z"]},
    {"id": 5, "pick": [], "one": 1.5, "more": {"x": 1, "y": True, "z": "no"}, "all": {}},
    {"id": "abcd\n", "tags": [3, 3.0, True], "pick": 10, "all": {"a": 1}, "pair": ["s"]},
    [],
    "text",
    None,
]


def test_every_keyword_the_compiler_supports_is_explained_as_jsonschema_does() -> None:
    s = SchemaSet("3.0.2", "test", {"zoo": ZOO}, draft="http://json-schema.org/draft-07/schema#").compile()
    finder = s.problem_finder("zoo")
    assert finder is not None
    seen: set[Any] = set()
    for doc in ZOO_DOCS:
        if doc == {"id": "abcd\n", "tags": [3, 3.0, True], "pick": 10, "all": {"a": 1}, "pair": ["s"]}:
            # jsonschema's "$" also matches before a final newline; the predicate (and so the lister)
            # does not: an id that would not survive a round trip is a problem in both of ours.
            assert s.fast["zoo"](doc) is False
            assert any(p.validator == "pattern" for p in finder(doc))
            continue
        assert explain_errors(finder(doc)) == explain(s.explain["zoo"], doc), doc
        assert (explain_errors(finder(doc)) is None) == s.fast["zoo"](doc)
        stack = finder(doc)
        while stack:  # every problem, those inside anyOf/oneOf alternatives too
            problem = stack.pop()
            seen.add(problem.validator)
            stack.extend(problem.context)
    assert seen >= {"required", "additionalProperties", "pattern", "minLength", "minItems", "uniqueItems", "enum"}
    assert seen >= {"anyOf", "oneOf", "type", "format", "maximum"}


def test_a_problem_only_jsonschema_can_word_falls_back_to_jsonschema() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "string", "maxLength": 2}, "b": {"const": 1}}}
    s = SchemaSet("3.0.2", "test", {"k": schema}, draft="http://json-schema.org/draft-07/schema#").compile()
    doc = {"a": "long", "b": 2}
    finder = s.problem_finder("k")
    assert finder is not None and [p.validator for p in finder(doc)] == ["maxLength", "const"]
    with pytest.raises(Unnamed):
        explain_errors(finder(doc))
    assert s.why("k", doc) == explain(s.explain["k"], doc)
    assert s.why("k", doc) == ("GENERR001", "a: 'long' is too long (and 1 other problem)")


def test_a_schema_the_compilers_lack_a_keyword_for_is_explained_by_jsonschema() -> None:
    schema = {"type": "object", "patternProperties": {"^x": {"type": "integer"}}}
    s = SchemaSet("3.0.2", "test", {"k": schema}, draft="http://json-schema.org/draft-07/schema#").compile()
    assert s.problem_finder("k") is None
    assert s.fast["k"]({"x1": 1}) and not s.fast["k"]({"x1": "one"})
    assert s.why("k", {"x1": "one"}) == ("GENERR001", "x1: expected integer, got string 'one'")


def test_problems_carry_their_place_and_alternatives() -> None:
    problems = compile_problems(ZOO, draft4=False)
    [pick] = [p for p in problems({"id": "abcd", "tags": ["a"], "pick": 0}) if p.validator == "anyOf"]
    assert list(pick.absolute_path) == ["pick"]
    assert [(p.schema_path, p.validator) for p in pick.context] == [((0,), "type"), ((1,), "minimum")]
