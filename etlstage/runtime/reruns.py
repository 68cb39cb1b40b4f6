"""A plain extractor run again: said out loud, or refused (stage key ``rerun``).

A plain E-stage has no offsets: each run extracts its whole source, and a run after one
that completed loads everything again. The supervisor cannot tell a source that holds
new data each run (today's file) from one that holds the same (a rerun by mistake), so
it says what the earlier run delivered, and when, before it extracts again (``rerun:
warn``, the default), or refuses to start (``rerun: refuse``, exit 2).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable

from etlstage.config.model import StageConfig
from etlstage.errors import ConfigError
from etlstage.protocol.vocabulary import Mode, StageType
from etlstage.state.store import Checkpoint

log = logging.getLogger("etlstage")

REFUSE = "refuse"


def delivered(stages: Iterable[StageConfig], checkpoints: Iterable[Checkpoint]) -> list[tuple[StageConfig, str]]:
    """Each plain E-stage instance that completed a run before: (its stage, what it delivered when)."""
    done = {c.source: c for c in checkpoints if c.windows_done > 0}
    out = []
    for s in stages:
        if s.type != StageType.E or s.mode != Mode.PLAIN:
            continue
        for i in range(s.instances):
            label = s.label(i)
            c = done.get(label)
            if c is None:
                continue
            when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(c.updated_at))
            runs = f"{c.windows_done} run(s)" if c.windows_done > 1 else "a run"
            out.append((s, f"stage {label!r} is a plain extractor that already delivered {c.messages:,} message(s) "
                           f"in {runs}, the last completed at {when}"))  # fmt: skip
    return out


def check(stages: Iterable[StageConfig], checkpoints: Iterable[Checkpoint]) -> None:
    """Warn about each plain extractor run again; refuse the run (ConfigError) for those with ``rerun: refuse``."""
    refused = []
    for stage, text in delivered(stages, checkpoints):
        if stage.rerun == REFUSE:
            refused.append(
                f"{text}; rerun: refuse stops a run that would extract it again. Set rerun: warn to extract "
                "it again, or give it a new state_dir"
            )
        else:
            log.warning(
                "%s; extracting it again now (a loader that is not idempotent loads it twice; "
                "rerun: refuse stops such a run)",
                text,
            )
    if refused:
        raise ConfigError(refused)


__all__ = ["REFUSE", "check", "delivered"]
