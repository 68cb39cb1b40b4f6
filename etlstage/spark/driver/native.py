"""Native stages: an E- or L-stage that runs as Spark itself instead of as a worker process.

A program may ship a Spark implementation of itself: a *source* factory for an E-stage
(``factory(spark, ctx) -> DataFrame``, one column ``value: binary``, one message per row
without any marker) or a *sink* factory for an L-stage (``factory(df, ctx) ->
DataStreamWriter``, the same rows in, returned configured but not started: the engine
sets the checkpoint, trigger and query name). It registers them as entry points named
by the program (the command's first word, by basename)::

    [options.entry_points]
    etlstage.spark.sources =
        etlstage-kinesis = etlstage_workers.kinesis.spark_source:native_source
    etlstage.spark.sinks =
        etlstage-spark-load = etlstage_workers.spark.native_sink:native_sink

The context a factory receives and the one way to read its arguments are public, in
:mod:`etlstage.native`; this module is the engine's side: finding factories, building
their context, framing a source's rows.

A stage's ``native`` key decides: ``true`` (default) uses the registered factory when
there is one, ``false`` runs the worker process, ``module:function`` names a factory;
``engine: {native: false}`` turns every native stage off.
"""

from __future__ import annotations

import importlib
import os
import socket
from collections.abc import Callable, Iterator
from importlib.metadata import entry_points
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from etlstage.config.model import StageConfig
from etlstage.errors import ConfigError
from etlstage.kit.transport import worker_env
from etlstage.native import NativeContext
from etlstage.protocol.vocabulary import StageType
from etlstage.spark.checkpoint import own_path, private_folder
from etlstage.spark.driver_line import KeepOnce
from etlstage.spark.tasks.plan import Plan
from etlstage.spark.tasks.transform import partition_id

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

SOURCES = "etlstage.spark.sources"
SINKS = "etlstage.spark.sinks"

Factory = Callable[..., Any]


def program_of(stage: StageConfig) -> str:
    return os.path.basename(stage.command[0]) if stage.command else ""


def factory_for(stage: StageConfig, plan: Plan) -> Factory | None:
    """The native factory that replaces ``stage``'s worker under the Spark engine, if any."""
    if stage.type == StageType.T or stage.native is False or not plan.config.engine.native:
        return None
    if isinstance(stage.native, str):
        return _named(stage, stage.native, plan.config.source)
    group = SOURCES if stage.type == StageType.E else SINKS
    for entry in entry_points(group=group):
        if entry.name == program_of(stage):
            try:
                factory = entry.load()
            except Exception as exc:
                raise ConfigError(
                    [f"stage {stage.name!r}: the native Spark {_kind(stage)} of {entry.name!r} "
                     f"({entry.value}) does not load: {exc} (native: false runs its worker process)"],
                    plan.config.source,
                ) from None  # fmt: skip
            return _callable(stage, factory, entry.value, plan.config.source)
    return None


def natives(plan: Plan) -> dict[str, Factory]:
    """Every stage of ``plan`` that runs natively, by name; a native sink must be the only L-stage."""
    found = {s.name: f for s in plan.config.stages if (f := factory_for(s, plan)) is not None}
    loads = [s for s in plan.config.stages if s.type == StageType.L]
    if len(loads) > 1 and any(s.name in found for s in loads):
        native = next(s.name for s in loads if s.name in found)
        raise ConfigError(
            [f"stage {native!r} runs as a native Spark sink, which must be the pipeline's only L-stage "
             f"(L-stages: {', '.join(s.name for s in loads)}); native: false runs its worker process"],
            plan.config.source,
        )  # fmt: skip
    return found


def session_conf(plan: Plan) -> dict[str, str]:
    """Spark settings the native stages need when the session starts: what a factory's
    ``spark_conf(ctx)`` attribute returns, if it has one (a sink's jars and SQL extension);
    jar lists are joined."""
    conf: dict[str, str] = {}
    for name, factory in natives(plan).items():
        wanted = getattr(factory, "spark_conf", None)
        if wanted is None:
            continue
        stage = next(s for s in plan.config.stages if s.name == name)
        for key, value in wanted(context_for(stage, plan, None)).items():
            if key == "spark.jars" and conf.get(key):
                value = f"{conf[key]},{value}"
            conf[key] = value
    return conf


def context_for(stage: StageConfig, plan: Plan, spark: SparkSession | None) -> NativeContext:
    """The public context (:mod:`etlstage.native`) the engine gives ``stage``'s native factory."""
    checkpoint = private_folder(own_path(plan.config, "native", stage.name))  # tasks write there with ctx.keep
    state_dir = plan.stage_dir(stage, 0)
    scenario = stage.scenario(0, state_dir)
    return NativeContext(
        stage=stage,
        argv=list(stage.command[1:]),
        env=worker_env(stage, scenario, plan.extra_env),
        state_dir=state_dir,
        checkpoint=str(checkpoint),
        once=plan.once,
        cwd=str(Path(stage.cwd or plan.config.base_dir).resolve()),
        spark=spark,
        keep=KeepOnce(plan.driver_line, stage.name) if plan.driver_line is not None else None,
    )


def _named(stage: StageConfig, spec: str, source: str) -> Factory:
    module_name, _, attr = spec.partition(":")
    try:
        factory = getattr(importlib.import_module(module_name), attr)
    except Exception as exc:  # ImportError, AttributeError, or whatever the module raises on import
        raise ConfigError([f"stage {stage.name!r}: native {spec!r} cannot be loaded: {exc}"], source) from None
    return _callable(stage, factory, spec, source)


def _callable(stage: StageConfig, factory: object, spec: str, source: str) -> Factory:
    if not callable(factory):
        raise ConfigError([f"stage {stage.name!r}: native {spec!r} is not callable"], source)
    return factory


def _kind(stage: StageConfig) -> str:
    return "source" if stage.type == StageType.E else "sink"


# --- the engine's side: rows of a native source become framed messages, and back --------


def frame_rows(column: pa.Array, eom: int) -> pa.Array:
    """A binary column of messages without a marker, each followed by ``eom`` (no Python loop).

    >>> frame_rows(pa.array([b"a", b"", b"bc"], pa.binary()), 10).to_pylist()
    [b'a\\n', b'\\n', b'bc\\n']
    """
    n = len(column)
    if n == 0:
        return pa.array([], pa.binary())
    column = column.cast(pa.binary())
    offsets = np.frombuffer(column.buffers()[1], np.int32)[column.offset : column.offset + n + 1]
    start = int(offsets[0])
    data = np.frombuffer(column.buffers()[2], np.uint8)[start : int(offsets[-1])]
    framed = (offsets - start) + np.arange(n + 1, dtype=np.int32)
    out = np.empty(len(data) + n, np.uint8)
    at_eom = np.zeros(len(out), bool)
    at_eom[framed[1:] - 1] = True
    out[at_eom] = eom
    out[~at_eom] = data
    return pa.Array.from_buffers(pa.binary(), n, [None, pa.py_buffer(framed.tobytes()), pa.py_buffer(out.tobytes())])


def frame_task(
    plan: Plan, consumer_name: str, eom: int
) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """``mapInArrow`` for a native source's rows: each message admitted to the stage that
    consumes it (none may hold one of its markers or pass its ``max_message_bytes``; its
    ``on_failure`` decides about those that do), then framed with ``eom``."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        consumer = plan.config.stage(consumer_name)
        who = f"stage {consumer.name!r}"
        markers = consumer.markers.named()
        for batch in batches:
            column = batch.column(0)
            if len(column) == 0:
                continue
            kept, refused = _admitted(column, markers, consumer.max_message_bytes, who)
            if refused:
                where = f"partition {partition_id()} on {socket.gethostname()}"
                plan.refuse(consumer, refused, where)
            if len(kept):
                yield pa.RecordBatch.from_arrays([frame_rows(kept, eom)], names=["value"])

    return run


def _admitted(
    column: pa.Array, markers: dict[bytes, str], limit: int, who: str
) -> tuple[pa.Array, list[tuple[bytes, str]]]:
    """The rows a stage can take, and the others with the reason (the fast path reads the
    column's bytes once per marker, in C)."""
    lengths = pc.binary_length(column)
    data = column.buffers()[2]
    body = b"" if data is None else data.to_pybytes()
    if not any(m in body for m in markers) and (len(column) == 0 or pc.max(lengths).as_py() <= limit):
        return column, []
    keep, refused = [], []
    for message in column.to_pylist():
        held = next((m for m in markers if m in message), None)
        if held is not None:
            why = f"a message for {who} contains its {markers[held]} byte 0x{held[0]:02x}"
            refused.append((message, why))
        elif len(message) > limit:
            why = f"a message of {len(message)} bytes for {who} is over its max_message_bytes of {limit}"
            refused.append((message, why))
        else:
            keep.append(message)
    return pa.array(keep, pa.binary()), refused


__all__ = ["SINKS", "SOURCES", "context_for", "factory_for", "frame_rows", "frame_task", "natives"]
