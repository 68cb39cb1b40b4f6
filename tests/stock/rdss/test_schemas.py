"""The project's schemas against the official releases: every official example passes, and
whatever the official schemas reject, ours reject too (mutation by mutation)."""

from __future__ import annotations

import copy
import json
import random
from typing import Any

import jsonschema
import pytest
import referencing
from etlstage_workers.rdss.compiler import compile_schema
from etlstage_workers.rdss.formats import FORMAT_CHECKS
from etlstage_workers.rdss.schemas import _format_checker, load_schema_set, schema_key

from .conftest import OFFICIAL, official_message

BODIES_302 = {
    ("MetadataCreate", "Command"): "metadata/create/request.json",
    ("MetadataUpdate", "Command"): "metadata/update/request.json",
    ("MetadataDelete", "Command"): "metadata/delete/request.json",
    ("MetadataRead", "Command"): "metadata/read/request.json",
    ("MetadataRead", "Document"): "metadata/read/response.json",
    ("VocabularyRead", "Command"): "vocabulary/read/request.json",
    ("VocabularyRead", "Document"): "vocabulary/read/response.json",
    ("VocabularyPatch", "Command"): "vocabulary/patch/request.json",
}
HEADERS_400 = {
    "metadata/create/article_create_request.json": "metadata_create_header.json",
    "metadata/create/dataset_create_request.json": "metadata_create_header.json",
    "metadata/create/research_object_create_request.json": "metadata_create_header.json",
    "metadata/create/thesis_dissertation_create_request.json": "metadata_create_error_header.json",
    "metadata/delete/research_object_delete_request.json": "metadata_delete_header.json",
    "metadata/read/research_object_read_request.json": "metadata_read_request_header.json",
    "metadata/read/research_object_read_response.json": "metadata_read_response_header.json",
    "metadata/update/research_object_update_request.json": "metadata_update_header.json",
    "preservation/preservation_event_request.json": "preservation_event_header.json",
}


def examples_302() -> list[tuple[str, dict[str, Any]]]:
    header = json.loads((OFFICIAL / "3.0.2/messages/header/header.json").read_text())
    out = [("message.json", official_message("3.0.2"))]
    for (mtype, mclass), path in BODIES_302.items():
        h = dict(header, messageType=mtype, messageClass=mclass)
        out.append(
            (
                path,
                {"messageHeader": h, "messageBody": json.loads((OFFICIAL / "3.0.2/messages/body" / path).read_text())},
            )
        )
    return out


# The 4.0.0 release's update example still uses the 3.0 field names (objectUuid, ...): the release's own
# schemas reject it, and so do ours.
STALE_400 = "metadata/update/research_object_update_request.json"


def examples_400() -> list[tuple[str, dict[str, Any]]]:
    out = [("example_message.json", official_message("4.0.0"))]
    for body, header in HEADERS_400.items():
        if body == STALE_400:
            continue
        h = json.loads((OFFICIAL / "4.0.0/messages/header" / header).read_text())
        out.append(
            (
                body,
                {"messageHeader": h, "messageBody": json.loads((OFFICIAL / "4.0.0/messages/body" / body).read_text())},
            )
        )
    return out


class _Sets(dict):  # type: ignore[type-arg]
    def __missing__(self, which: str) -> Any:
        origin, spec = which.split("-")
        self[which] = load_schema_set(spec, OFFICIAL / spec if origin == "official" else None)
        return self[which]


@pytest.fixture(scope="module")
def sets() -> dict[str, Any]:
    return _Sets()


def _key(doc: dict[str, Any], spec: str) -> str:
    h = doc["messageHeader"]
    return schema_key(h["messageType"], h["messageClass"], spec)


@pytest.mark.parametrize("name, doc", examples_302(), ids=[n for n, _ in examples_302()])
@pytest.mark.parametrize("which", ["own-3.0.2", "official-3.0.2"])
def test_every_official_302_example_is_valid(sets: dict[str, Any], which: str, name: str, doc: dict[str, Any]) -> None:
    s = sets[which]
    key = _key(doc, "3.0.2")
    assert list(s.explain[key].iter_errors(doc)) == []
    assert s.fast[key](doc) is True


@pytest.mark.parametrize("name, doc", examples_400(), ids=[n for n, _ in examples_400()])
@pytest.mark.parametrize("which", ["own-4.0.0", "official-4.0.0"])
def test_every_official_400_example_is_valid(sets: dict[str, Any], which: str, name: str, doc: dict[str, Any]) -> None:
    s = sets[which]
    key = _key(doc, "4.0.0")
    assert list(s.explain[key].iter_errors(doc)) == []
    assert s.fast[key](doc) is True


@pytest.mark.parametrize("which", ["own-4.0.0", "official-4.0.0"])
def test_the_stale_400_update_example_is_rejected_by_both(sets: dict[str, Any], which: str) -> None:
    h = json.loads((OFFICIAL / "4.0.0/messages/header" / HEADERS_400[STALE_400]).read_text())
    doc = {"messageHeader": h, "messageBody": json.loads((OFFICIAL / "4.0.0/messages/body" / STALE_400).read_text())}
    assert sets[which].fast["message_MetadataUpdate"](doc) is False
    assert not sets[which].explain["message_MetadataUpdate"].is_valid(doc)


def _reference_validator(spec: str, key_doc: dict[str, Any]) -> jsonschema.protocols.Validator:
    """The official schemas under plain jsonschema, references resolved through the registry (the spec's formats on)."""
    s = load_schema_set(spec, OFFICIAL / spec)
    root = s.roots[_key(key_doc, spec)]
    cls = jsonschema.validators.validator_for(root)
    return cls(root, registry=s.registry, format_checker=_format_checker())


def _paths(doc: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(doc, dict):
        for k, v in doc.items():
            out += _paths(v, prefix + (k,))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            out += _paths(v, prefix + (i,))
    return out


def _get(doc: Any, path: tuple[Any, ...]) -> Any:
    for p in path:
        doc = doc[p]
    return doc


REPLACEMENTS = [
    "",
    "X",
    0,
    -1,
    1.5,
    99,
    True,
    None,
    [],
    {},
    "2004-08-01",
    "2004-08-01T10:00:00",
    "ABC-not-uuid",
    "5680E8E0-28A5-4B20-948E-FD0D08781E0B",
    "nobody",
    "1.2",
    "not a uri",
    "-host-",
]


def mutations(doc: dict[str, Any], rng: random.Random, n: int) -> list[dict[str, Any]]:
    paths = [p for p in _paths(doc) if p]
    out = []
    for _ in range(n):
        m = copy.deepcopy(doc)
        path = rng.choice(paths)
        parent = _get(m, path[:-1])
        action = rng.randrange(4)
        if action == 0 and isinstance(parent, dict):
            del parent[path[-1]]
        elif action == 1 and isinstance(parent, dict):
            parent["unexpected" + str(rng.randrange(3))] = "value"
        elif action == 2 and isinstance(parent, list):
            parent.append(copy.deepcopy(parent[path[-1]]))  # a duplicate item
        else:
            parent[path[-1]] = rng.choice(REPLACEMENTS)
        out.append(m)
    return out


@pytest.mark.slow  # over 10 s
@pytest.mark.parametrize("spec, which", [("3.0.2", "own-3.0.2"), ("4.0.0", "own-4.0.0")])
def test_own_schemas_reject_whatever_the_official_ones_reject(sets: dict[str, Any], spec: str, which: str) -> None:
    rng = random.Random(20260101)
    examples = examples_302() if spec == "3.0.2" else examples_400()
    checked = rejected = 0
    for _name, doc in examples:
        if doc["messageHeader"]["messageType"] not in sets[which].message_types:
            continue
        reference = _reference_validator(spec, doc)
        for m in mutations(doc, rng, 150 if spec == "3.0.2" else 70):
            try:
                key = _key(m, spec)
            except (KeyError, TypeError):
                continue
            if key not in sets[which].fast or key not in sets[f"official-{spec}"].fast:
                continue
            official_ok = reference.is_valid(m)
            ours_fast = sets[which].fast[key](m)
            ours_explained = sets[which].explain[key].is_valid(m)
            assert ours_fast == ours_explained, f"compiled and explaining validators disagree on {m}"
            if not official_ok:
                rejected += 1
                assert not ours_fast, f"the official {spec} schema rejects, ours accepts: {json.dumps(m)[:400]}"
            checked += 1
    assert checked > 400 and rejected > 250


def test_compiler_agrees_with_jsonschema_on_the_official_schemas(sets: dict[str, Any]) -> None:
    rng = random.Random(7)
    s = sets["official-3.0.2"]
    for _name, doc in examples_302():
        key = _key(doc, "3.0.2")
        for m in mutations(doc, rng, 60):
            assert s.fast[key](m) == s.explain[key].is_valid(m), json.dumps(m)[:300]


def test_compiler_handles_local_refs_any_of_and_unique_items() -> None:
    schema = {
        "definitions": {"n": {"type": "integer", "minimum": 1}},
        "type": "object",
        "properties": {
            "a": {"type": "array", "uniqueItems": True, "items": {"$ref": "#/definitions/n"}},
            "b": {"anyOf": [{"type": "string"}, {"$ref": "#/definitions/n"}]},
        },
        "additionalProperties": False,
    }
    valid = compile_schema(schema, formats=FORMAT_CHECKS)
    assert valid({"a": [1, 2], "b": "x"}) and valid({"b": 3})
    assert not valid({"a": [1, 1]}) and not valid({"a": [0]}) and not valid({"b": 0}) and not valid({"c": 1})
    reg = referencing.Registry()
    assert compile_schema({"type": "string", "pattern": "^a$"}, registry=reg)("a\n") is False


def test_schema_dir_resolves_ids_locally_and_reports_a_broken_dir(tmp_path: Any) -> None:
    with pytest.raises(FileNotFoundError, match="no \\*.json"):
        load_schema_set("3.0.2", tmp_path)
    (tmp_path / "schemas").mkdir()
    (tmp_path / "schemas/types.json").write_text((OFFICIAL / "3.0.2/schemas/types.json").read_text())
    with pytest.raises(FileNotFoundError, match="request_schema.json"):
        load_schema_set("3.0.2", tmp_path)
