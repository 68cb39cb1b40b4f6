"""What a loader's reported output holds, seen from outside: for the check that a batch
sent again with its id is loaded once.

A worker in any language may say where it loads (``"output"`` in its report file,
docs/protocol.md: reports): a file, a folder, or something no path names (a table, a
topic). A file is measured in lines and bytes, a folder in its files and their lines;
what is not a path here cannot be measured, and a check using it says so.

>>> import os, tempfile
>>> d = tempfile.mkdtemp()
>>> with open(os.path.join(d, "out.txt"), "wb") as f:
...     _ = f.write(b"a\\nb\\n")
>>> measure(["out.txt", "orders"], cwd=d)  # orders: not there (a table's name, say)
{'out.txt': '2 line(s), 4 byte(s)'}
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path


def reported_outputs(state_dir: str) -> list[str]:
    """Every ``"output"`` the workers' report files in ``state_dir`` name (a string or a
    list of strings each), in order, each once."""
    found: list[str] = []
    for path in sorted(Path(state_dir).glob("report-*.json")):
        try:
            output = json.loads(path.read_text()).get("output")
        except (OSError, ValueError, AttributeError):
            continue
        found.extend(o for o in (output if isinstance(output, list) else [output]) if isinstance(o, str))
    return list(dict.fromkeys(found))


def _lines(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    return data.count(b"\n"), len(data)


def _describe(path: Path) -> str | None:
    """The file's lines and bytes, or the folder's files and lines; None if neither."""
    if path.is_file():
        lines, size = _lines(path)
        return f"{lines} line(s), {size} byte(s)"
    if path.is_dir():
        # hidden files are a writer's temporaries (FileSink's .tmp-*), not loaded data
        files = [p for p in path.rglob("*") if p.is_file() and not any(part.startswith(".") for part in p.parts)]
        return f"{len(files)} file(s), {sum(_lines(p)[0] for p in files)} line(s)"
    return None


def measure(outputs: Iterable[str], cwd: str | None = None) -> dict[str, str]:
    """Each output that is a file or a folder (relative to ``cwd``, where the worker ran),
    described; outputs that are not (a table, a topic) are left out."""
    base = Path(cwd or os.getcwd())
    seen = {}
    for output in outputs:
        described = _describe(base / output)
        if described is not None:
            seen[output] = described
    return seen


__all__ = ["measure", "reported_outputs"]
