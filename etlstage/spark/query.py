"""The pipeline as one Spark Structured Streaming query: build it, run it, report it.

E-stages are sources (:mod:`etlstage.spark.source`), unioned; each T-stage is a
``mapInArrow`` over the binary ``value`` column (:mod:`etlstage.spark.transform`) on
``instances`` partitions; the L-stages are the sink (:mod:`etlstage.spark.sink`).
Spark's checkpoint holds the offsets and commits: a micro-batch is a window.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import re
import signal
import sys
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from etlstage.config.model import PipelineConfig, StageConfig
from etlstage.errors import EtlstageError
from etlstage.protocol.markers import Markers
from etlstage.spark.checkpoint import check_checkpoint, remove_abandoned
from etlstage.spark.report import Counts
from etlstage.state.store import ensure_private_dir

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming import StreamingQuery

    from etlstage.spark.plan import Plan

log = logging.getLogger("etlstage.spark")

ENGINE_CONF = {
    "spark.sql.adaptive.enabled": "false",  # not used by streaming queries; Spark warns when it is on
    # the checkpoint's files hold message data: owner-only (0600, folders 0700), like the state directory
    "spark.hadoop.fs.permissions.umask-mode": "077",
}


def build(spark: SparkSession, plan: Plan) -> Any:
    """The query's DataStreamWriter, ready to start."""
    from pyspark.sql import functions as F

    from etlstage.spark.native import context_for, frame_task, natives
    from etlstage.spark.transform import reframe_task, transform_task

    config = plan.config
    encoded = plan.encode()
    extractors = [s for s in config.stages if s.type == "E"]
    transforms = [s for s in config.stages if s.type == "T"]
    loads = [s for s in config.stages if s.type == "L"]
    consumer = transforms[0] if transforms else loads[0]
    spool_partitions = consumer.instances if not consumer.keyed else 1
    native = natives(plan)  # stages that run as Spark itself (a source, a sink) instead of a worker
    native_sink = native.get(loads[0].name)
    # Native sources straight into a native sink: bare messages all the way, never framed.
    bare = native_sink is not None and not transforms and all(e.name in native for e in extractors)

    def observed(df: DataFrame, stage: StageConfig) -> DataFrame:
        return df.observe(
            Counts.metric(stage), F.count(F.lit(1)).alias("rows"), F.sum(F.length("value")).alias("bytes")
        )

    def source_parts(e: StageConfig) -> int:
        return e.instances if e.mode == "cyclic" and e.offsets == "supervisor" else spool_partitions

    fused = [] if native_sink else fusable(transforms, loads[0], sum(source_parts(e) for e in extractors))
    # One driver-side extractor whose spool partitions are the sink's and every T-stage in the
    # sink's tasks: the tasks read the spool files themselves; no message crosses the JVM.
    handoff = (
        not native
        and len(extractors) == 1
        and source_parts(extractors[0]) == spool_partitions
        and not (extractors[0].mode == "cyclic" and extractors[0].offsets == "supervisor")
        and len(fused) == len(transforms)
        and spool_partitions == loads[0].instances
        and not (loads[0].keyed and loads[0].instances > 1)
    )
    frames: list[tuple[DataFrame, int]] = []
    markers = extractors[0].markers
    if any(e.markers != markers for e in extractors):
        markers = consumer.markers  # each extractor's messages admitted to the consumer, as under the supervisor
    for e in extractors:
        if e.name in native:
            df = observed(native[e.name](spark, context_for(e, plan, spark)), e)
            if not bare:  # rows become messages framed for their consumer
                df = df.mapInArrow(frame_task(plan, consumer.name, markers.eom), "value binary")
            frames.append((df, 0))  # its partitions are the source's own: placed anew below
            continue
        df = (
            spark.readStream.format("etlstage-extract")
            .option("plan", encoded)
            .option("stage", e.name)
            .option("partitions", str(spool_partitions))
            .option("handoff", "1" if handoff else "")
            .load()
        )
        parts = source_parts(e)
        if not handoff:  # with the handoff, the sink's tasks count the extracted messages
            df = observed(df, e)
        if e.markers != markers:
            df = df.mapInArrow(reframe_task(plan, e.markers, consumer.name), "value binary")
        frames.append((df, parts))
    df, parts = frames[0]
    for other, n in frames[1:]:
        df, parts = df.unionAll(other), parts + n

    for t in transforms[: len(transforms) - len(fused)]:
        df, parts = place(df, parts, t, markers)
        df = observed(df.mapInArrow(transform_task(plan, t.name, markers), "value binary"), t)
        markers = t.markers
    engine = config.engine
    if native_sink is not None:
        if not bare:  # the sink takes messages without their EOM
            df = df.select(F.expr("substring(value, 1, length(value) - 1)").alias("value"))
        df = observed(df, loads[0])
        writer = native_sink(df, context_for(loads[0], plan, spark))
        return _started_by_engine(writer.option("checkpointLocation", engine.checkpoint), plan)
    if not fused:
        df, parts = place(df, parts, loads[0], markers)
    writer = (
        df.writeStream.format("etlstage-load")
        .option("plan", encoded)
        .option("markers", markers.to_option())
        .option("chain", ",".join(t.name for t in fused))
        .option("handoff", extractors[0].name if handoff else "")
        .option("checkpointLocation", engine.checkpoint)
    )
    return _started_by_engine(writer, plan)


def place(df: DataFrame, parts: int, stage: StageConfig, source: Markers) -> tuple[DataFrame, int]:
    """``df`` (``parts`` partitions, messages framed with ``source`` markers) on the stage's
    ``instances`` partitions: by each message's key under ``partition_by``."""
    from etlstage.spark.transform import KEYED_SCHEMA, key_task

    n = stage.instances
    if stage.keyed and n > 1:
        keyed = df.mapInArrow(key_task(stage, source), KEYED_SCHEMA)
        return keyed.repartitionById(n, "pid").select("value"), n
    if parts == n:
        return df, n
    # Never coalesce: Spark would run the upstream step's partitions inside fewer tasks,
    # and a T-stage's worker for partition 1 would never start (its messages going to
    # partition 0's, whose keyed state is not theirs).  A shuffle keeps them apart.
    return df.repartition(n), n


def _started_by_engine(writer: Any, plan: Plan) -> Any:
    """The query's name and trigger: the engine's, whoever wrote the sink."""
    writer = writer.queryName(_query_name(plan.config))
    if plan.once:
        return writer.trigger(availableNow=True)
    if plan.config.engine.trigger > 0:
        return writer.trigger(processingTime=f"{plan.config.engine.trigger:g} seconds")
    return writer


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


def _query_name(config: PipelineConfig) -> str:
    return "etlstage_" + "".join(c if c.isalnum() else "_" for c in config.name)


def run_query(
    config: PipelineConfig,
    *,
    once: bool = False,
    progress: bool = True,
    extra_env: dict[str, str] | None = None,
    attach: Callable[[Counts], Callable[[], None]] | None = None,
) -> int:
    """0 when done (or stopped), 1 when the query failed, 2 when Spark cannot start.

    ``attach``: started with the run's counters before Spark starts (the CLI's HTTP
    endpoints); returns the function that stops it.
    """
    from etlstage.spark.session import SparkStartError, require_pyspark

    try:
        require_pyspark()
    except SparkStartError as exc:
        log.error("%s", exc)
        return exc.exit_code
    from etlstage.spark.services import running_services

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # executors run this Python (and etlstage)
    try:
        with running_services(config, dict(extra_env or {})) as exports:
            # Native stages run in Spark's own Python processes, whose environment is the
            # JVM's: what the services export (an emulator's endpoint, its credentials) must
            # be there too — the driver's, inherited locally, and every executor's.
            os.environ.update(exports)
            return _run_query(config, once, progress, {**(extra_env or {}), **exports}, attach)
    except EtlstageError as exc:  # a service that does not start
        log.error("%s", exc)
        return exc.exit_code


def _run_query(
    config: PipelineConfig,
    once: bool,
    progress: bool,
    extra_env: dict[str, str],
    attach: Callable[[Counts], Callable[[], None]] | None,
) -> int:
    from etlstage.spark.native import session_conf
    from etlstage.spark.plan import Plan
    from etlstage.spark.session import SparkStartError, start_session

    engine = config.engine
    plain_only = all(s.mode == "plain" for s in config.stages if s.type == "E")
    plan = Plan(config, once=once or plain_only, extra_env=extra_env)
    try:
        ensure_private_dir(plan.checkpoint)  # ours, 0700, not a link, wherever engine.checkpoint puts it
    except EtlstageError as exc:
        log.error("engine.checkpoint: %s", exc)
        return exc.exit_code
    counts = Counts(config, plan.run_id)
    try:
        stop_http = attach(counts) if attach else lambda: None  # a port in use stops the run at once
    except EtlstageError as exc:
        log.error("%s", exc)
        return exc.exit_code
    try:
        native_conf = session_conf(plan)  # what native stages need at start: jars, SQL extensions
    except EtlstageError as exc:
        stop_http()
        log.error("%s", exc)
        return exc.exit_code
    try:
        spark = start_session(
            engine.master,
            f"etlstage {config.name}",
            {
                **ENGINE_CONF,
                **native_conf,
                **{f"spark.executorEnv.{k}": v for k, v in extra_env.items()},
                **engine.conf,
            },
            connect_timeout=10,
            log_level=spark_log_level(),
        )
    except SparkStartError as exc:
        stop_http()
        log.error("%s", exc)
        return exc.exit_code
    try:
        return run_in(spark, plan, progress=progress, counts=counts)
    finally:
        stop_http()
        with contextlib.suppress(Exception):  # the JVM may be gone already (a signal to the process group)
            spark.stop()


def spark_log_level() -> str:
    """Spark's own log: WARN, unless etlstage logs at DEBUG (``--log-level DEBUG``): then INFO."""
    return "INFO" if logging.getLogger("etlstage").getEffectiveLevel() <= logging.DEBUG else "WARN"


def missing_programs(spark: SparkSession, plan: Plan) -> list[str]:
    """Stages whose program cannot be found where their tasks run: checked by a small job
    with a task per core, before the query starts (driver-side extractors: on the driver)."""
    from etlstage.spark.native import natives
    from etlstage.spark.probe import find_programs, probe_job

    config = plan.config
    native = natives(plan)  # no program of theirs runs
    workers = [s for s in config.stages if s.name not in native]
    on_driver = [s for s in workers if s.type == "E" and not (s.mode == "cyclic" and s.offsets == "supervisor")]
    on_executors = [s for s in workers if s not in on_driver]
    problems = find_programs(plan, on_driver)
    if on_executors:
        problems += probe_job(spark, plan, [s.name for s in on_executors])
    return problems


def run_in(spark: SparkSession, plan: Plan, *, progress: bool = True, counts: Counts | None = None) -> int:
    """Run ``plan``'s query in an existing session until it ends; print the summary."""
    from etlstage.spark.replay import replay_deadletters
    from etlstage.spark.shipping import ship
    from etlstage.spark.sink import LoadSink
    from etlstage.spark.source import ExtractSource

    config = plan.config
    try:
        check_checkpoint(plan.checkpoint)
        packs = plan.checkpoint / "etlstage" / "ship"
        plan = dataclasses.replace(plan, shipped=ship(spark, config.engine.ship, packs, plan.run_id[:12]))
    except EtlstageError as exc:
        log.error("%s", exc)
        return exc.exit_code
    try:
        missing = missing_programs(spark, plan)
    except Exception as exc:  # the job itself failed: no executor, a lost server, a broken Python
        log.error("cannot run the pipeline on Spark: the start-up check on the executors failed: %s", explain(exc))
        return 2
    if missing:
        log.error("cannot run the pipeline on Spark:\n%s", "\n".join(f"  - {m}" for m in missing))
        return 2
    spark.dataSource.register(ExtractSource)
    spark.dataSource.register(LoadSink)
    from etlstage.spark.native import natives

    counts = counts or Counts(config, plan.run_id)
    counts.adopt_reports(list(natives(plan)))
    counts.begin()
    spark.streams.addListener(counts.listener())
    names = " → ".join(s.name for s in config.stages)
    log.info(
        "pipeline %s on Spark %s: %s (checkpoint %s)%s",
        config.name,
        config.engine.master,
        names,
        config.engine.checkpoint,
        " --once" if plan.once else "",
    )
    code = 0
    query: StreamingQuery | None = None
    stop = threading.Event()
    restore = _on_signals(stop)
    try:
        remove_abandoned(config.engine.checkpoint)
        replay_deadletters(spark, plan)  # before new data, as the supervisor injects them first
        query = build(spark, plan).start()
        reporter = counts.reporter(progress)
        while not query.awaitTermination(1):
            reporter()
            if stop.is_set():
                log.warning("stopping: the micro-batch in flight is not committed; it is replayed next run")
                query.stop()
                break
        error = query.exception()
        if error is not None:
            log.error("pipeline failed: %s", explain(error))
            code = 1
    except EtlstageError as exc:
        log.error("pipeline failed: %s", exc)
        code = exc.exit_code
    except Exception as exc:  # Spark's own errors (analysis, start-up) surface here
        if stop.is_set():
            log.error(
                "stopped: Spark's JVM went away with the signal (it got it too: signal the etlstage process "
                "alone for a graceful stop); the micro-batch in flight is replayed next run"
            )
        else:
            log.error("pipeline failed: %s", explain(exc))
        code = 1
    finally:
        restore()
        with contextlib.suppress(Exception):  # a JVM that is gone cannot report any more
            counts.finish(query)
            spark.streams.removeListener(counts.listener())
        _retire_workers(spark, plan)
    print(counts.summary(), file=sys.stderr)
    return code


def _retire_workers(spark: SparkSession, plan: Plan) -> None:
    """Through Spark Connect the server's Python processes, and the workers they run,
    outlive this query: ask them to stop the run's workers now, not at Spark's idle timeout."""
    from etlstage.spark.probe import retire_job
    from etlstage.spark.session import is_connect

    if not is_connect(spark):
        return  # stopping the session ends its executors' Python processes, and their workers
    try:
        hosts = retire_job(spark, plan.run_id)
        log.info("the query's workers stop on %s", ", ".join(hosts))
    except Exception as exc:  # the server is gone: its Python processes, and the workers, with it
        log.warning("could not ask the Spark Connect server to stop the workers: %s", explain(exc))


def explain(exc: BaseException) -> str:
    """The etlstage error inside a Spark exception (a worker's report), else its first lines."""
    text = str(exc)
    for marker in (
        "etlstage.errors.PipelineError: ",
        "etlstage.errors.WorkerError: ",
        "etlstage.errors.WorkerGone: ",
        "etlstage.errors.WorkerTimeout: ",
        "etlstage.errors.MarkerInMessage: ",
        "etlstage.errors.ProtocolViolation: ",
    ):
        at = text.find(marker)
        if at >= 0:
            body = text[at + len(marker) :]
            lines = []
            for line in body.splitlines():
                if line.startswith(("\tat ", "at org.", "Traceback", "JVM stacktrace", "=== Streaming Query")) or (
                    "org.apache.spark" in line
                ):
                    break
                line = re.sub(r"(\s*SQLSTATE: \w+)+\s*$", "", line)  # Spark's error classes, appended
                if line:
                    lines.append(line)
            return "\n".join(lines).rstrip()
    return "\n".join(text.strip().splitlines()[:6])


def _on_signals(stop: threading.Event) -> Any:
    """SIGINT/SIGTERM stop the query after a graceful request; the previous handlers come back after."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}

    def handler(signum: int, frame: object) -> None:
        log.warning("received %s: stopping the query", signal.Signals(signum).name)
        stop.set()

    for sig in previous:
        signal.signal(sig, handler)

    def restore() -> None:
        for sig, h in previous.items():
            signal.signal(sig, h)

    return restore


__all__ = ["build", "explain", "place", "run_in", "run_query"]
