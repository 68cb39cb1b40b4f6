"""Parser and schema errors put in words a YAML user reads.

PyYAML speaks of tokens (``expected <block end>, but found '?'``) and jsonschema of
Python values (``None is not of type 'integer'``).  These functions turn both into what
the author of a ``stages.yaml`` sees in the file: indentation, quotes, keys, ``null``.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterator
from typing import TYPE_CHECKING

import yaml

if TYPE_CHECKING:  # jsonschema is imported only where a document is checked
    import jsonschema

Path_ = tuple[str | int, ...]

_TYPE_WORDS = {
    "integer": "a whole number",
    "number": "a number",
    "string": "text",
    "boolean": "true or false",
    "array": "a list",
    "object": "a mapping of keys to values",
    "null": "empty (null)",
}
_KINDS = {list: ("array",), str: ("string",), bool: ("boolean",), int: ("integer", "number"), float: ("number",)}


def show(value: object) -> str:
    """``value`` as it would be written in YAML (``null``, ``true``, ``[a, b]``); text keeps its quotes."""
    if isinstance(value, str):
        return repr(value)
    if value is None:
        return "null (an empty value)"
    text = yaml.safe_dump(value, default_flow_style=True, width=1 << 30, allow_unicode=True).strip()
    return text.removesuffix("\n...").removesuffix("...").strip()


def did_you_mean(word: str, choices: list[str]) -> str | None:
    close = difflib.get_close_matches(word, choices, n=1, cutoff=0.6)
    return close[0] if close else None


def schema_problems(e: jsonschema.ValidationError) -> Iterator[tuple[Path_, str]]:
    """One or more (place, words) for one schema error; an unknown key is placed at the key itself."""
    path: Path_ = tuple(e.absolute_path)
    if e.validator in ("additionalProperties", "unevaluatedProperties") and isinstance(e.instance, dict):
        known = sorted((e.schema.get("properties") or {}).keys()) if isinstance(e.schema, dict) else []
        for key in [k for k in e.instance if k not in known]:
            guess = did_you_mean(str(key), known)
            hint = f"; did you mean {guess!r}?" if guess else (f"; known keys: {', '.join(known)}" if known else "")
            yield (*path, key), f"unknown key {key!r}{hint}"
        return
    yield path, _words(e)


def _words(e: jsonschema.ValidationError) -> str:
    value = show(e.instance)
    if e.validator == "oneOf" and e.context:
        # explain with the alternative meant for this kind of value (a number for a number...)
        kinds = _KINDS.get(type(e.instance), ("object",) if isinstance(e.instance, dict) else ("null",))
        same = [c for c in e.context if _schema_type(c.schema) in kinds]
        from jsonschema.exceptions import best_match

        best = best_match(same or e.context)
        wanted = e.schema.get("description") if isinstance(e.schema, dict) else None
        tail = f"; expected {wanted[0].lower()}{wanted[1:].rstrip('.')}" if wanted else ""
        return f"{value} is not valid: {_words(best)}{tail}"
    if e.validator == "type":
        types = e.validator_value if isinstance(e.validator_value, list) else [e.validator_value]
        return f"{value} is not {' or '.join(_TYPE_WORDS.get(str(t), str(t)) for t in types)}"
    if e.validator == "enum":
        choices = [str(x) for x in e.validator_value]
        guess = did_you_mean(str(e.instance), choices) if isinstance(e.instance, str) else None
        hint = f"; did you mean {guess!r}?" if guess else ""
        return f"{value} is not one of {', '.join(show(x) for x in e.validator_value)}{hint}"
    if e.validator == "required":
        missing = re.findall(r"'([^']+)' is a required property", e.message)
        return f"missing key {missing[0]!r}" if missing else e.message
    if e.validator in ("minItems", "maxItems"):
        n = len(e.instance) if isinstance(e.instance, list) else 0
        if list(e.absolute_path) == ["stages"]:
            return f"a pipeline needs at least an E-stage and an L-stage; this one has {n} stage(s)"
        bound = "at least" if e.validator == "minItems" else "at most"
        return f"needs {bound} {e.validator_value} item(s); has {n}"
    if e.validator == "minLength":
        return f"{value} is empty; give a value"
    if e.validator == "minimum":
        return f"{value} is less than the minimum of {e.validator_value}"
    if e.validator == "exclusiveMinimum":
        return f"{value} is not more than {e.validator_value}"
    if e.validator == "maximum":
        return f"{value} is more than the maximum of {e.validator_value}"
    if e.validator == "pattern":
        return f"{value} does not have the form this key takes (pattern {e.validator_value})"
    return e.message


def _schema_type(schema: object) -> str | None:
    t = schema.get("type") if isinstance(schema, dict) else None
    return t if isinstance(t, str) else None


def yaml_problem(exc: yaml.YAMLError) -> str:
    """PyYAML's complaint, said in terms of the file (indentation, quotes, brackets)."""
    problem = str(getattr(exc, "problem", None) or exc)
    opened = getattr(exc, "context_mark", None)
    since = f" (the block opened on line {opened.line + 1})" if opened is not None else ""
    if problem.startswith("expected <block end>"):
        if problem.endswith("'-'"):
            return (
                "a list item ('- ') where a key was expected: a list goes under a key of its own, "
                f"or this line is indented wrongly{since}"
            )
        return (
            "this line is not indented like the lines above it: the keys of one mapping must start "
            f"in the same column{since}"
        )
    if problem == "mapping values are not allowed here":
        return (
            "a ':' YAML did not expect here: a value holding ': ' needs quotes; otherwise this line is "
            "indented deeper than the key above it, or that key lacks its ':'"
        )
    if re.fullmatch(r"expected ',' or '[\]}]', but got '\{'", problem):
        # ${VAR} unquoted in [a, ${VAR}]: '$' is read as a value, '{' as a mapping opening after it
        return (
            f"{problem}: inside [...] or {{...}} a '{{' opens a mapping — a ${{VAR}} there needs quotes: \"${{VAR}}\""
        )
    if problem == "could not find expected ':'":
        return f"a key without its ':' (write key: value){since}"
    tab = re.fullmatch(r"found character '(.+)' that cannot start any token", problem)
    if tab:
        if tab.group(1) == "\\t":
            return "a tab: YAML indents with spaces only"
        return f"a value cannot start with {tab.group(1)!r}; put the value in quotes"
    if "end of stream" in problem or "<stream end>" in problem:
        what = {"quoted scalar": "a quote", "flow": "a '[' or '{'"}
        context = str(getattr(exc, "context", "") or "")
        opener = next((w for k, w in what.items() if k in context), "a quote or bracket")
        # only a quote's mark is where it opened; a bracket's is where the parser gave up
        where = f" opened on line {opened.line + 1}" if opened is not None and "quoted" in context else ""
        return f"the file ends inside {opener}{where} that is never closed"
    alias = re.fullmatch(r"found undefined alias '(.+)'", problem)
    if alias:
        return f"*{alias.group(1)} names no anchor &{alias.group(1)} defined before it"
    if problem == "found unhashable key":
        return "a '{' or '[' starts a key or a value read as a mapping or list (a {{ template }}?); quote the value"
    return problem.replace("<block end>", "the end of an indented block").replace("<block mapping start>", "a key")
