"""``${VAR}`` in stages.yaml values, read as docker compose reads them.

- ``${VAR}``: the variable's value; unset is an error naming the place.
- ``${VAR:-default}``: the default when VAR is unset or empty; ``${VAR-default}``: when unset.
- ``${VAR:?message}`` / ``${VAR?message}``: an error with the message when unset or empty / unset.
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

_REF = re.compile(r"\$(?:(\$)|\{([A-Za-z_][A-Za-z0-9_]*)(?:(:?[-?])([^}]*))?\}|(\{))")
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

    def one(m: re.Match[str]) -> str:
        dollar, name, op, arg, bad = m.groups()
        if dollar:
            return "$"
        if bad:
            problems.append(
                f"{where}: {text!r}: '${{' starts no variable reference: write ${{NAME}} or ${{NAME:-default}} "
                "(a name of letters, digits and _), or $${ for a literal '${'"
            )
            return m.group(0)
        value = env.get(name)
        missing = value is None or (op is not None and op.startswith(":") and value == "")
        if not missing:
            return str(value)
        if op in (":-", "-"):
            return str(arg)
        if op in (":?", "?"):
            problems.append(f"{where}: ${{{name}}}: {arg or 'is not set'}")
            return m.group(0)
        problems.append(
            f"{where}: ${{{name}}}: the environment variable {name} is not set; set it, "
            f"or give a default: ${{{name}:-value}}"
        )
        return m.group(0)

    return _REF.sub(one, text)
