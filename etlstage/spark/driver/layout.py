"""Where each stage of a pipeline runs in the Spark engine's one query, decided from the
stages alone: pure, no Spark, no DataFrame (:mod:`etlstage.spark.driver.build` builds from it)."""

from __future__ import annotations

import dataclasses

from etlstage.config.model import PipelineConfig, StageConfig
from etlstage.protocol.markers import Markers


@dataclasses.dataclass(frozen=True)
class Layout:
    """Where each stage runs in the query, decided from the stages alone (no DataFrame yet)."""

    extractors: list[StageConfig]
    transforms: list[StageConfig]
    load: StageConfig  # the first L-stage: the sink's own instances
    consumer: StageConfig  # the stage the sources feed
    spool_partitions: int  # partitions of a driver-side extractor's spool
    native: frozenset[str]  # stages that run as Spark itself (a source, a sink) instead of a worker
    bare: bool  # native sources straight into a native sink: bare messages all the way, never framed
    fused: list[StageConfig]  # the last T-stages, run inside the sink's tasks
    handoff: bool  # the sink's tasks read the one extractor's spool files themselves
    markers: Markers  # what the sources' messages are framed with for their consumer

    def source_parts(self, e: StageConfig) -> int:
        """The partitions an extractor's messages arrive on."""
        return e.instances if e.mode == "cyclic" and e.offsets == "supervisor" else self.spool_partitions


def layout(config: PipelineConfig, native: set[str] | frozenset[str]) -> Layout:
    """How ``config`` runs as one query, ``native`` naming the stages that run as Spark itself.

    >>> from etlstage.config.loader import parse_config
    >>> config = parse_config(
    ...     "stages:\\n"
    ...     "  - {name: src, type: E, command: [cat, in.txt]}\\n"
    ...     "  - {name: up, type: T, command: [tr, a-z, A-Z]}\\n"
    ...     "  - {name: sink, type: L, command: [tee, out.txt]}\\n"
    ... )
    >>> plain = layout(config, native=set())
    >>> [t.name for t in plain.fused], plain.handoff, plain.bare
    (['up'], True, False)
    >>> natively = layout(config, native={"sink"})
    >>> natively.fused, natively.handoff
    ([], False)
    """
    extractors = [s for s in config.stages if s.type == "E"]
    transforms = [s for s in config.stages if s.type == "T"]
    load = next(s for s in config.stages if s.type == "L")
    consumer = transforms[0] if transforms else load
    spool_partitions = consumer.instances if not consumer.keyed else 1
    native_sink = load.name in native
    bare = native_sink and not transforms and all(e.name in native for e in extractors)

    def parts(e: StageConfig) -> int:
        return e.instances if e.mode == "cyclic" and e.offsets == "supervisor" else spool_partitions

    fused = [] if native_sink else fusable(transforms, load, sum(parts(e) for e in extractors))
    # One driver-side extractor whose spool partitions are the sink's and every T-stage in the
    # sink's tasks: the tasks read the spool files themselves; no message crosses the JVM.
    handoff = (
        not native
        and len(extractors) == 1
        and parts(extractors[0]) == spool_partitions
        and not (extractors[0].mode == "cyclic" and extractors[0].offsets == "supervisor")
        and len(fused) == len(transforms)
        and spool_partitions == load.instances
        and not (load.keyed and load.instances > 1)
    )
    markers = extractors[0].markers
    if any(e.markers != markers for e in extractors):
        markers = consumer.markers  # each extractor's messages admitted to the consumer, as under the supervisor
    return Layout(
        extractors, transforms, load, consumer, spool_partitions, frozenset(native), bare, fused, handoff, markers
    )


def fusable(transforms: list[StageConfig], load: StageConfig, parts: int) -> list[StageConfig]:
    """The T-stages at the end of the chain that keep their input's partitions (as the L-stage
    does): they run inside the sink's tasks, with no trip through the JVM between them."""
    n = load.instances
    keeps = not (load.keyed and n > 1)
    fused: list[StageConfig] = []
    for t in reversed(transforms):
        if not keeps or t.instances != n or (t.keyed and n > 1):
            break
        fused.insert(0, t)
    if not keeps:
        return []
    upstream = transforms[: len(transforms) - len(fused)]
    if not upstream and parts != n:
        return []  # the sources' partitions differ: the chain needs a repartition first
    if upstream and upstream[-1].instances != n:
        return fused[1:] if fused else []
    return fused


__all__ = ["Layout", "fusable", "layout"]
