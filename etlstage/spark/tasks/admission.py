"""What a Spark task may hand a stage's worker: the supervisor's admission rule, per block.

A message that holds one of the receiving stage's markers (possible when stages use
different markers) or is over its ``max_message_bytes`` is refused, exactly as the
supervisor refuses it (:func:`etlstage.kit.admit.admit`), and the stage's
``on_failure`` decides: ``deadletter`` sets it aside in the dead-letter store and the
rest goes on; ``fail`` stops the query with an error naming the stage, the partition,
the host and the escaped bytes.
"""

from __future__ import annotations

import socket
from collections.abc import Callable, Iterable, Iterator

from etlstage.config.model import StageConfig
from etlstage.kit.admit import admit
from etlstage.protocol.markers import Markers
from etlstage.spark.tasks.blocks import count_messages

RefuseFn = Callable[[StageConfig, list[tuple[bytes, str]], str], None]


def admitted(
    blocks: Iterable[bytes], source: Markers, stage: StageConfig, refuse: RefuseFn, partition: int
) -> Iterator[bytes]:
    """``blocks`` (framed with ``source``) re-framed for ``stage``, without what it refuses."""
    who = f"stage {stage.name!r}"
    limit = stage.max_message_bytes
    for block in blocks:
        if not block:
            continue
        if source == stage.markers and len(block) <= limit:
            # the upstream worker's output was parsed with these very markers, so no message
            # holds one; and none is longer than the block
            yield block
            continue
        kept, n, refused = admit(block, count_messages(block, source.eom), source, stage.markers, limit, who)
        if refused:
            refuse(stage, refused, f"partition {partition} on {socket.gethostname()}")
        if n:
            yield kept


__all__ = ["RefuseFn", "admitted"]
