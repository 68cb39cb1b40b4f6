"""What may be written to a stage: messages free of its markers and within its size limit.

The whole block is checked with a few ``bytes`` scans; only when one fails is it split,
so that each refused message can be set aside on its own (dead letter, or a failure
that names it) and the rest go on.
"""

from __future__ import annotations

import logging

from etlstage.config.model import StageConfig
from etlstage.errors import MarkerInMessage, PipelineError, escape_bytes
from etlstage.protocol.framing import reframe, split_block
from etlstage.protocol.markers import Markers
from etlstage.protocol.vocabulary import OnFailure
from etlstage.state.store import StateStore

log = logging.getLogger("etlstage.pipeline")


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


def refusal(stage: StageConfig, refused: list[tuple[bytes, str]], where: str = "") -> PipelineError:
    """The error that stops a run when ``stage`` (on_failure: fail) cannot take a message.

    ``where``: the place it happened, when more than the stage is needed (a Spark task's
    partition and host)."""
    message, why = refused[0]
    at = f" ({where})" if where else ""
    return PipelineError(
        f"{why}{at}; bytes: {escape_bytes(message)}\n"
        f"stage {stage.name!r} has on_failure=fail, so the pipeline stops (nothing committed past it); "
        "with on_failure: deadletter such a message is set aside and the rest goes on"
    )


def deadletter_refused(store: StateStore, stage: StageConfig, refused: list[tuple[bytes, str]]) -> list[int]:
    """Messages ``stage`` cannot take, each written to the dead-letter store on its own
    (``etlstage deadletter`` lists them); their ids."""
    eom = stage.markers.eom if all(stage.markers.EOM not in m for m, _ in refused) else None
    ids = []
    for message, why in refused:
        # stored framed with an EOM it does not contain, so that it splits back whole
        sep = eom if eom is not None else next(b for b in range(256) if bytes([b]) not in message)
        ident = store.add_deadletter(stage.name, 0, why, message + bytes([sep]), 1, sep)
        ids.append(ident)
        log.error(
            "stage %r: a message could not be written to it (%s); set aside as dead letter #%d",
            stage.name,
            why,
            ident,
        )
    return ids


def refuse(store: StateStore, stage: StageConfig, refused: list[tuple[bytes, str]], where: str = "") -> int:
    """``stage``'s on_failure policy for messages it cannot take: raise :func:`refusal`
    (fail), or :func:`deadletter_refused` them (deadletter); how many were set aside."""
    if stage.on_failure != OnFailure.DEADLETTER:
        raise refusal(stage, refused, where)
    return len(deadletter_refused(store, stage, refused))


__all__ = ["admit", "deadletter_refused", "refusal", "refuse"]
