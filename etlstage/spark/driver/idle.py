"""A ``--once`` run with nothing new: known before Spark starts, so no JVM is started for it.

A run under the available-now trigger whose source plans no batch commits nothing and
changes nothing: Spark's JVM, its session and the query's start (most of such a run) are
spent for an empty answer. When the pipeline's one extractor is a native source that can
say whether it has anything after a given offset (a ``has_new(ctx, offset) -> bool``
attribute on its factory: its own planning round, without Spark), the engine asks it
before starting Spark, with the offset the query would plan from — its last batch's,
committed — and ends the run when the answer is no.

Every doubt starts Spark as before: a first run (no committed batch), a batch planned and
not committed (Spark replays it), a checkpoint on a URI or on a Spark Connect server's
host, dead letters marked for replay, more than one extractor, an extractor that runs as
a worker process or cannot answer, an answer that fails. A wrong "no" would only leave
records for the next run (a source may record the committed batch's positions, as
Spark's first planning round does, never any past them); a wrong "yes" costs the start
it always cost.
"""

from __future__ import annotations

import json
import logging
import time
from typing import TYPE_CHECKING

from etlstage.spark.checkpoint import committed_offsets, is_local
from etlstage.state.store import StateStore

if TYPE_CHECKING:
    from etlstage.spark.tasks.plan import Plan

log = logging.getLogger("etlstage.spark")

HAS_NEW = "has_new"  # the attribute of a native source factory this module asks


def nothing_new(plan: Plan) -> str | None:
    """Why a ``--once`` run of ``plan`` would plan no batch at all (a line for the log), or
    None when it may have work or that cannot be known without Spark."""
    from etlstage.spark.driver.native import context_for, natives

    config = plan.config
    extractors = [s for s in config.stages if s.type == "E"]
    if not plan.once or len(extractors) != 1 or not is_local(config.engine.checkpoint):
        return None
    if config.engine.master.startswith("sc://"):
        return None  # the query's checkpoint is the Spark Connect server's, on its host
    stage = extractors[0]
    factory = natives(plan).get(stage.name)
    has_new = getattr(factory, HAS_NEW, None)
    if has_new is None:
        return None
    lines = committed_offsets(plan.checkpoint)
    if lines is None or len(lines) != 1 or lines[0] == "-":
        return None
    if _replays_waiting(plan):
        return None
    started = time.monotonic()
    try:
        offset = json.loads(lines[0])
        if has_new(context_for(stage, plan, None), offset):
            log.info("stage %r has new input (asked in %.2fs): starting Spark", stage.name, time.monotonic() - started)
            return None
    except Exception as exc:  # the query's own start reports a source that cannot plan
        log.info("stage %r: its source could not say whether it has new input (%s): starting Spark", stage.name, exc)
        return None
    asked = time.monotonic() - started
    return f"stage {stage.name!r} has nothing after the last committed micro-batch (asked in {asked:.2f}s)"


def _replays_waiting(plan: Plan) -> bool:
    """Dead letters marked for replay: the run sends them (or says why it leaves them)."""
    store = StateStore(plan.config.state_dir)
    try:
        return bool(store.deadletters(status="replay"))
    finally:
        store.close()


__all__ = ["HAS_NEW", "nothing_new"]
