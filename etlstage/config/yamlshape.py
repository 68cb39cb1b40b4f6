"""Refuse a pipeline file whose shape would cost unbounded time or memory, before it is loaded.

PyYAML builds anchors and aliases by reference, but whatever walks the loaded values
afterwards (the schema check, the line-number map, the stage settings) sees every alias
expanded: ten nested aliases of ten items each are ten billion values (a "billion
laughs" YAML bomb).  Its composer also recurses once per nesting level, so a few
thousand levels end in ``RecursionError``.  This check reads the file's parse events —
no recursion, no expansion — and stops at the first of:

- a file longer than :data:`MAX_BYTES` (1 MiB),
- nesting deeper than :data:`MAX_DEPTH` levels,
- more than :data:`MAX_VALUES` values once every alias is expanded,
- an alias inside the very collection it names (a structure that contains itself).

Each refusal names the line and column.  A real ``stages.yaml`` is a few levels deep and
a few thousand values at most; the limits are far above that.
"""

from __future__ import annotations

import yaml

from etlstage.errors import ConfigError

MAX_BYTES = 1 << 20
MAX_DEPTH = 50
MAX_VALUES = 100_000


def too_long(source: str) -> ConfigError:
    return ConfigError([f"{source}: longer than {MAX_BYTES:,} bytes, the most a pipeline file may hold"])


def check_yaml_shape(text: str, source: str) -> None:
    """Raise :class:`ConfigError` when ``text`` is too large, too deep or expands too far.

    YAML syntax errors are left to the loader (it reports them with their place).
    """
    if len(text) > MAX_BYTES:
        raise too_long(source)
    expanded: dict[str, int] = {}  # anchor -> values under it, aliases expanded
    open_collections: list[tuple[str | None, list[int]]] = []  # (anchor, [values so far])
    total = 0
    for event in yaml.parse(text, Loader=yaml.SafeLoader):
        mark = event.start_mark
        where = f"{source}:{mark.line + 1}:{mark.column + 1}" if mark else source
        if isinstance(event, yaml.CollectionEndEvent):
            anchor, count = open_collections.pop()
            if anchor is not None:
                expanded[anchor] = count[0]
            if open_collections:
                open_collections[-1][1][0] += count[0]
            continue
        if isinstance(event, yaml.AliasEvent):
            if any(a == event.anchor for a, _ in open_collections):
                raise ConfigError(
                    [
                        f"{where}: the alias *{event.anchor} stands inside the collection &{event.anchor} it names "
                        "(a value that contains itself); write the value out instead"
                    ]
                )
            values = expanded.get(event.anchor or "", 1)  # an unknown anchor is the loader's error to report
        elif isinstance(event, (yaml.ScalarEvent, yaml.CollectionStartEvent)):
            values = 1
        else:
            continue
        total += values
        if total > MAX_VALUES:
            what = f"the alias *{event.anchor} here" if isinstance(event, yaml.AliasEvent) else "this value"
            raise ConfigError(
                [
                    f"{where}: {what} makes the file hold more than {MAX_VALUES:,} values once aliases are expanded "
                    "(nested aliases multiply: a YAML bomb?); refused — write the values out or use fewer aliases"
                ]
            )
        if isinstance(event, yaml.CollectionStartEvent):
            if len(open_collections) >= MAX_DEPTH:
                raise ConfigError(
                    [f"{where}: values nested more than {MAX_DEPTH} levels deep; a pipeline file needs a handful"]
                )
            open_collections.append((event.anchor, [1]))
        else:
            if isinstance(event, yaml.ScalarEvent) and event.anchor is not None:
                expanded[event.anchor] = 1
            if open_collections:
                open_collections[-1][1][0] += values
