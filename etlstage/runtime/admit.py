"""What may be written to a stage: messages free of its markers and within its size limit.

The whole block is checked with a few ``bytes`` scans; only when one fails is it split,
so that each refused message can be set aside on its own (dead letter, or a failure
that names it) and the rest go on.
"""

from __future__ import annotations

from etlstage.errors import MarkerInMessage
from etlstage.protocol.framing import reframe, split_block
from etlstage.protocol.markers import Markers


def admit(
    block: bytes, count: int, source: Markers, target: Markers, max_bytes: int, who: str
) -> tuple[bytes, int, list[tuple[bytes, str]]]:
    """``block`` (framed with ``source``) re-framed for ``target``: (block, messages, refused).

    ``refused`` lists (message without its EOM, why) for each message that contains one of
    the target's markers or is longer than ``max_bytes``.

    >>> from etlstage.protocol.markers import DEFAULT_MARKERS as M
    >>> admit(b"a\\nbb\\n", 2, M, M, 1, "stage 'x'")[1:]
    (1, [(b'bb', "a message of 2 bytes for stage 'x' is over its max_message_bytes of 1")])
    """
    if len(block) - count <= max_bytes or max(map(len, split_block(block, source))) <= max_bytes:
        try:
            return (reframe(block, source, target, who) if source != target else block), count, []
        except MarkerInMessage:
            pass
    kept: list[bytes] = []
    refused: list[tuple[bytes, str]] = []
    for m in split_block(block, source):
        if len(m) > max_bytes:
            refused.append((m, f"a message of {len(m)} bytes for {who} is over its max_message_bytes of {max_bytes}"))
            continue
        try:
            kept.append(reframe(m + source.EOM, source, target, who) if source != target else m + source.EOM)
        except MarkerInMessage as exc:
            refused.append((m, exc.problem.replace(" at byte", " at message byte")))
    return b"".join(kept), len(kept), refused


__all__ = ["admit"]
