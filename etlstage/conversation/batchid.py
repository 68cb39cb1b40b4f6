"""Every L batch's identity, for loaders that make themselves idempotent (docs/protocol.md:
batch ids).

A loader that skips a batch whose id it has committed must never skip data it does not
have: an id may be the same only for the same messages at the same place. So the id is
a hash of the pipeline, the stage and instance, the batch's place in its windows'
streams (each window's source and number, and how many of that window's messages this
stage instance took before the batch) and a digest of the batch's bytes. The same
batch sent again (a loader crash, a time-out, a stray EOP) is the same job, so it keeps
its id; a batch of other messages — cut elsewhere, with window sizes changed between
runs — has another, because its content digest differs; the same content at another
place has another, because its place differs.

The id reaches the worker, when its stage asks for it (``batch_id: true``), as one
header message first in each batch (:mod:`etlstage.protocol.batchheader`).

Pure: no I/O, no clocks.

>>> a = batch_id("orders", "sink", 0, [("src", 4, 0)], b"m1\\nm2\\n")
>>> len(a), a == batch_id("orders", "sink", 0, [("src", 4, 0)], b"m1\\nm2\\n")
(32, True)
>>> a == batch_id("orders", "sink", 0, [("src", 4, 2)], b"m1\\nm2\\n")  # same content, elsewhere
False
>>> a == batch_id("orders", "sink", 0, [("src", 4, 0)], b"m1\\nm3\\n")  # same place, other messages
False
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

Place = tuple[str, int, int]  # (window source, window number, messages of it taken before)


def batch_id(pipeline: str, stage: str, instance: int, places: Iterable[Place], *blocks: bytes) -> str:
    """The id of the batch whose messages (each with its EOM) are ``blocks`` joined, at
    ``places``: 32 lower-case hex digits."""
    content = hashlib.sha256()
    for block in blocks:
        content.update(block)
    h = hashlib.sha256()
    for part in (pipeline, stage, str(instance), *(f"{s}\x1f{n}\x1f{k}" for s, n, k in places)):
        h.update(part.encode() + b"\x1e")
    h.update(content.digest())
    return h.hexdigest()[:32]


__all__ = ["Place", "batch_id"]
