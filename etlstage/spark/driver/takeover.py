"""Taking a pipeline over from the supervisor engine: its state, not Spark's old checkpoint, says where to go on.

Both engines keep one state (DESIGN §6): committed offsets in the pipeline's state
store, worker-managed offsets in the stage's directory.  Spark's checkpoint is the
Spark engine's own record of its micro-batches; after a run on the supervisor engine
its offsets are behind the pipeline's and its uncommitted batch (spooled messages, a
planned window) was extracted again by that run.  So when the last run was the
supervisor's, the checkpoint is set aside and the query starts from the pipeline's
state (:meth:`etlstage.spark.tasks.source.PolicyReader.initialOffset`); it is renamed first and
then removed, so a crash meanwhile leaves no half of it where Spark looks.  After a run on
Spark it stays: Spark replays its uncommitted batch with the same offsets.
"""

from __future__ import annotations

import logging
import shutil
import time
from pathlib import Path

log = logging.getLogger("etlstage.spark")


def take_over(checkpoint: str, last_engine: str) -> bool:
    """Move Spark's ``checkpoint`` aside when ``last_engine`` ran the pipeline last; True when it did."""
    if last_engine != "supervisor":
        return False
    if "://" in checkpoint:  # not a local folder: this process cannot remove it
        log.warning(
            "the supervisor engine ran this pipeline last: remove the Spark checkpoint %s before a run on Spark, "
            "or that run goes on from where Spark last stopped and reads again what the supervisor read since",
            checkpoint,
        )
        return False
    path = Path(checkpoint)
    if not path.is_dir():
        return False
    aside = path.with_name(f"{path.name}.before-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}")
    path.rename(aside)
    log.info(
        "the supervisor engine ran this pipeline last: the Spark checkpoint %s is behind the pipeline's state "
        "and was removed; the query starts where the pipeline's state says",
        path,
    )
    shutil.rmtree(aside, ignore_errors=True)
    return True


__all__ = ["take_over"]
