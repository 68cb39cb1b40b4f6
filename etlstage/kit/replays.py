"""Dead letters marked by `etlstage deadletter replay`: which ones the next run sends again.

Both engines read them here: a dead letter goes back to its T- or L-stage, framed with
that stage's markers; one whose stage is not a T- or L-stage of the pipeline, or whose
messages the stage still cannot take, is left as it is (with a warning).  Each engine
then sends it through the rest of the pipeline (by key under ``partition_by``) and marks
it ``replayed`` once it is loaded.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

from etlstage.config.model import StageConfig
from etlstage.errors import MarkerInMessage
from etlstage.protocol.framing import check_messages
from etlstage.state.store import DeadLetter, StateStore

log = logging.getLogger("etlstage.pipeline")


@dataclass
class Replay:
    deadletter: DeadLetter
    stage: StageConfig
    block: bytes  # its messages, each followed by the stage's EOM
    count: int


def marked_for_replay(store: StateStore, stages: Sequence[StageConfig]) -> list[Replay]:
    """The dead letters marked ``replay`` that can go back to their stage, oldest first."""
    by_name = {s.name: s for s in stages}
    found = []
    for d in store.deadletters(status="replay"):
        stage = by_name.get(d.stage)
        if stage is None or stage.type == "E":
            log.warning("dead letter #%d: stage %r is not a T/L stage of this pipeline; left as it is", d.id, d.stage)
            continue
        messages = d.split()
        try:
            block = check_messages(messages, stage.markers, f"stage {stage.name!r}")
        except MarkerInMessage as exc:
            log.warning("dead letter #%d still cannot be sent to stage %r (%s); left as it is", d.id, d.stage, exc)
            continue
        found.append(Replay(d, stage, block, len(messages)))
    return found


__all__ = ["Replay", "marked_for_replay"]
