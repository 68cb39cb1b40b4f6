"""``${VAR}`` in stages.yaml values, read as docker compose reads them.

- ``${VAR}``: the variable's value; unset is an error naming the place.
- ``${VAR:-default}``: the default when VAR is unset or empty; ``${VAR-default}``: when unset.
- ``${VAR:?message}`` / ``${VAR?message}``: an error with the message when unset or empty / unset.
- A default or message may itself hold references, nested as deep as wanted
  (``${A:-${B:-${C}}}``); it is expanded only when used, as POSIX shells do, so an unset
  variable in a default that is not needed is no error.  Braces must balance: a ``${``
  without its ``}`` is an error naming the place.
- ``$$`` is one literal ``$`` (so ``$${VAR}`` is the text ``${VAR}``); a ``$`` before
  anything else is left as it is.

Only values are substituted, never keys.  An unquoted value is typed after substitution,
as if the result had been written in the file (``batch_size: ${N:-100}`` is a number);
a quoted one stays text.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import yaml

from etlstage.errors import ConfigError

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_OPS = (":-", ":?", "-", "?")
_STR = "tag:yaml.org,2002:str"


def load_yaml(
    text: str, source: str, environ: Mapping[str, str], loader_class: type[yaml.SafeLoader] = yaml.SafeLoader
) -> Any:
    """``yaml.safe_load`` (or ``loader_class``, a SafeLoader) with every ``${...}`` of every
    value substituted from ``environ``.

    Raises :class:`ConfigError` naming ``source:line:column`` of each reference that cannot be resolved.
    """
    loader = loader_class(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        problems: list[str] = []
        _walk(node, loader, source, environ, problems)
        if problems:
            raise ConfigError(problems)
        return loader.construct_document(node)
    finally:
        loader.dispose()


def _walk(node: yaml.Node, loader: yaml.SafeLoader, source: str, env: Mapping[str, str], out: list[str]) -> None:
    seen: set[int] = set()  # an alias is the same node again: substitute it once
    stack = [node]
    while stack:
        n = stack.pop()
        if id(n) in seen:
            continue
        seen.add(id(n))
        if isinstance(n, yaml.MappingNode):
            stack.extend(v for _, v in n.value)  # values only: keys are the file's own words
        elif isinstance(n, yaml.SequenceNode):
            stack.extend(n.value)
        elif isinstance(n, yaml.ScalarNode) and n.tag == _STR and "$" in n.value:
            where = f"{source}:{n.start_mark.line + 1}:{n.start_mark.column + 1}"
            value = substitute(n.value, env, where, out)
            if value != n.value:
                n.value = value
                if n.style is None:  # unquoted: typed as if the result were written here
                    n.tag = loader.resolve(yaml.ScalarNode, value, (True, False))


def substitute(text: str, env: Mapping[str, str], where: str, problems: list[str]) -> str:
    """``text`` with its references replaced; each one that cannot be is added to ``problems``."""
    out, end = _Expander(text, env, where, problems).expand(0, inner=False, use=True)
    return out if end == len(text) else out + text[end:]


class _Expander:
    """A small recursive-descent reader: a default or message may itself hold references
    (``${A:-${B:-x}}``), expanded only when it is used, as POSIX shells do."""

    def __init__(self, text: str, env: Mapping[str, str], where: str, problems: list[str]) -> None:
        self.text, self.env, self.where, self.problems = text, env, where, problems

    def expand(self, i: int, inner: bool, use: bool) -> tuple[str, int]:
        """The text from ``i`` expanded, up to the end (or, ``inner``, to an unnested ``}``),
        and the index it stopped at.  ``use`` false: only its syntax is checked."""
        text, parts = self.text, []
        while i < len(text):
            c = text[i]
            if inner and c == "}":
                break
            if c == "$" and text.startswith("$$", i):
                parts.append("$")
                i += 2
            elif c == "$" and text.startswith("${", i):
                value, i = self.reference(i, use)
                parts.append(value)
            else:
                parts.append(c)
                i += 1
        return "".join(parts), i

    def reference(self, start: int, use: bool) -> tuple[str, int]:
        """The ``${...}`` at ``start``: its value and the index after its ``}``."""
        text = self.text
        m = _NAME.match(text, start + 2)
        if m is None:
            self._bad(start, "'${' starts no variable reference")
            return "${", start + 2
        name, i = m.group(0), m.end()
        op = next((o for o in _OPS if text.startswith(o, i)), None)
        if op is None:
            if text.startswith("}", i):
                return self._value(name, None, "", start, use), i + 1
            self._bad(
                start,
                f"'${{{name}' is followed by {text[i : i + 1]!r}, not '}}' or one of :- - :? ?"
                if i < len(text)
                else f"'${{{name}' has no closing '}}'",
            )
            return text[start:i], i
        value = self.env.get(name)
        missing = value is None or (op.startswith(":") and value == "")
        arg, j = self.expand(i + len(op), inner=True, use=use and missing)
        if j >= len(text):
            self._bad(start, f"'${{{name}{op}' has no closing '}}'")
            return text[start:j], j
        return self._value(name, op, arg, start, use), j + 1

    def _value(self, name: str, op: str | None, arg: str, start: int, use: bool) -> str:
        value = self.env.get(name)
        missing = value is None or (op is not None and op.startswith(":") and value == "")
        if not missing:
            return str(value)
        if op in (":-", "-"):
            return arg
        if not use:
            return ""
        if op in (":?", "?"):
            self.problems.append(f"{self.where}: ${{{name}}}: {arg or 'is not set'}")
        else:
            self.problems.append(
                f"{self.where}: ${{{name}}}: the environment variable {name} is not set; set it, "
                f"or give a default: ${{{name}:-value}}"
            )
        return ""

    def _bad(self, start: int, what: str) -> None:
        self.problems.append(
            f"{self.where}: {self.text!r}: {what} (at character {start + 1}): write ${{NAME}} or "
            "${NAME:-default} (a name of letters, digits and _; a default may hold references and "
            "ends at its matching '}'), or $${ for a literal '${'"
        )
