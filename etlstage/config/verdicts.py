"""Documents already found valid against ``stages.schema.json``, remembered per user.

Checking a document against the schema needs jsonschema, whose import (with what it
loads: referencing, attrs, the metaschemas, format helpers) is the largest single part
of every ``etlstage`` command's start-up, about 70 ms of the supervisor's ~400 ms before
its first worker starts. The verdict is a pure function of the schema and the document,
so a document found valid once is not checked again: the digest of the schema's bytes
and the document's ``repr`` (which tells ``1`` from ``'1'``, ``1.0`` and ``True``, as
the schema does) is kept in a file of recent digests in an owner-only folder.

Only "valid" is remembered: a document with problems is checked every time, which is
also what puts them in words. Anything amiss with the folder or the file (not ours,
writable by others, a link, unreadable, garbage) means no cache: the document is checked.
``ETLSTAGE_CONFIG_CACHE`` names another folder, ``off`` turns the cache off.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

from etlstage.errors import StateError
from etlstage.state.store import ensure_private_dir

ENV = "ETLSTAGE_CONFIG_CACHE"
FILE = "valid-configs"
KEEP = 256  # digests kept, most recent last: one line each, 65 bytes
_DIGEST_LEN = 64


def _folder() -> Path | None:
    given = os.environ.get(ENV, "")
    if given.lower() in ("off", "0", "false", "no"):
        return None
    return Path(given) if given else Path.home() / ".cache" / "etlstage" / "config"


def digest(schema_text: str, document: Any) -> str | None:
    """The key of ``document`` checked against the schema written as ``schema_text``;
    ``None`` for a document whose ``repr`` would not tell it apart (an object of a type
    YAML's safe loading does not make)."""
    if not _plain(document):
        return None
    h = hashlib.sha256(schema_text.encode())
    h.update(b"\0")
    h.update(repr(document).encode("utf-8", "surrogatepass"))
    return h.hexdigest()


def _plain(value: Any) -> bool:
    if isinstance(value, dict):
        return all(_plain(k) and _plain(v) for k, v in value.items())
    if isinstance(value, list):
        return all(_plain(v) for v in value)
    return value is None or type(value) in (str, int, float, bool)


def _read(path: Path) -> list[str]:
    try:
        with os.fdopen(os.open(path, os.O_RDONLY | os.O_NOFOLLOW), "rb") as f:
            st = os.fstat(f.fileno())
            if st.st_uid != os.getuid() or st.st_mode & 0o022:
                return []
            text = f.read(KEEP * (_DIGEST_LEN + 1) * 2)
    except OSError:
        return []
    lines = text.decode("ascii", "replace").split("\n")
    return [d for d in lines if len(d) == _DIGEST_LEN and all(c in "0123456789abcdef" for c in d)]


def known_valid(key: str | None) -> bool:
    """``key`` (from :func:`digest`) was recorded valid by :func:`remember` before."""
    folder = _folder()
    return key is not None and folder is not None and key in _read(folder / FILE)


def remember(key: str | None) -> None:
    """Record ``key`` valid (best effort: a cache that cannot be written is no cache)."""
    folder = _folder()
    if key is None or folder is None:
        return
    try:
        ensure_private_dir(folder)
    except StateError:
        return
    path = folder / FILE
    keys = [k for k in _read(path) if k != key][-(KEEP - 1) :] + [key]
    part = folder / f".{FILE}.{os.getpid()}"
    try:
        fd = os.open(part, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write("\n".join(keys) + "\n")
        os.replace(part, path)
    except OSError:
        try:
            os.unlink(part)
        except OSError:
            pass
