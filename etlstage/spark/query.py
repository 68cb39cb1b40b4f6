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
import socket
import sys
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from etlstage.config.model import PipelineConfig, StageConfig
from etlstage.errors import EtlstageError
from etlstage.protocol.markers import Markers
from etlstage.spark.checkpoint import check_checkpoint, is_local, own_path, remove_abandoned
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


def build(spark: SparkSession, plan: Plan) -> Any:
    """The query's DataStreamWriter, ready to start."""
    from etlstage.spark.native import natives

    native = natives(plan)
    lay = layout(plan.config, set(native))
    encoded = plan.encode()
    df, parts = _sources(spark, plan, encoded, lay, native)
    markers = lay.markers
    for t in lay.transforms[: len(lay.transforms) - len(lay.fused)]:
        df, parts, markers = _transform(df, parts, plan, t, markers)
    native_sink = native.get(lay.load.name)
    if native_sink is not None:
        from etlstage.spark.native import context_for

        if not lay.bare:  # the sink takes messages without their EOM
            from pyspark.sql import functions as F

            df = df.select(F.expr("substring(value, 1, length(value) - 1)").alias("value"))
        df = _observed(df, lay.load)
        writer = native_sink(df, context_for(lay.load, plan, spark))
        return _started_by_engine(writer.option("checkpointLocation", plan.config.engine.checkpoint), plan)
    return _started_by_engine(_sink(df, parts, plan.config, encoded, lay, markers), plan)


def _observed(df: DataFrame, stage: StageConfig) -> DataFrame:
    """``df`` counted (rows, bytes) for the stage's figures."""
    from pyspark.sql import functions as F

    return df.observe(Counts.metric(stage), F.count(F.lit(1)).alias("rows"), F.sum(F.length("value")).alias("bytes"))


def _sources(
    spark: SparkSession, plan: Plan, encoded: str, lay: Layout, native: dict[str, Any]
) -> tuple[DataFrame, int]:
    """Every extractor's messages, unioned, framed with ``lay.markers``; and their partitions."""
    from etlstage.spark.native import context_for, frame_task
    from etlstage.spark.transform import reframe_task

    frames: list[tuple[DataFrame, int]] = []
    for e in lay.extractors:
        if e.name in native:
            df = _observed(native[e.name](spark, context_for(e, plan, spark)), e)
            if not lay.bare:  # rows become messages framed for their consumer
                df = df.mapInArrow(frame_task(plan, lay.consumer.name, lay.markers.eom), "value binary")
            frames.append((df, 0))  # its partitions are the source's own: placed anew below
            continue
        df = (
            spark.readStream.format("etlstage-extract")
            .option("plan", encoded)
            .option("stage", e.name)
            .option("partitions", str(lay.spool_partitions))
            .option("handoff", "1" if lay.handoff else "")
            .load()
        )
        if not lay.handoff:  # with the handoff, the sink's tasks count the extracted messages
            df = _observed(df, e)
        if e.markers != lay.markers:
            df = df.mapInArrow(reframe_task(plan, e.markers, lay.consumer.name), "value binary")
        frames.append((df, lay.source_parts(e)))
    df, parts = frames[0]
    for other, n in frames[1:]:
        df, parts = df.unionAll(other), parts + n
    return df, parts


def _transform(
    df: DataFrame, parts: int, plan: Plan, t: StageConfig, markers: Markers
) -> tuple[DataFrame, int, Markers]:
    """A T-stage on its own partitions: its output, their number, its markers."""
    from etlstage.spark.transform import place, transform_task

    df, parts = place(df, parts, t, markers)
    df = _observed(df.mapInArrow(transform_task(plan, t.name, markers), "value binary"), t)
    return df, parts, t.markers


def _sink(df: DataFrame, parts: int, config: PipelineConfig, encoded: str, lay: Layout, markers: Markers) -> Any:
    """The workers' sink (the fused T-stages in its tasks), its writer ready to start."""
    from etlstage.spark.transform import place

    if not lay.fused:
        df, parts = place(df, parts, lay.load, markers)
    return (
        df.writeStream.format("etlstage-load")
        .option("plan", encoded)
        .option("markers", markers.to_option())
        .option("chain", ",".join(t.name for t in lay.fused))
        .option("handoff", lay.extractors[0].name if lay.handoff else "")
        .option("checkpointLocation", config.engine.checkpoint)
    )


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
    from etlstage.spark.worker_python import spark_python

    engine = config.engine
    plain_only = all(s.mode == "plain" for s in config.stages if s.type == "E")
    plan = Plan(config, once=once or plain_only, extra_env=extra_env)
    try:
        if is_local(engine.checkpoint):
            ensure_private_dir(plan.checkpoint)  # ours, 0700, not a link, wherever engine.checkpoint puts it
        connector_conf = connectors(config)
    except EtlstageError as exc:
        log.error("engine.checkpoint: %s", exc)
        return exc.exit_code
    try:
        python = spark_python(engine.master, config.state_dir)
    except EtlstageError as exc:
        log.error("%s", exc)
        return exc.exit_code
    counts = Counts(config, plan.run_id)
    try:
        stop_http = attach(counts) if attach else lambda: None  # a port in use stops the run at once
    except EtlstageError as exc:
        log.error("%s", exc)
        return exc.exit_code
    counts.phase("session" if engine.master.startswith("sc://") else "JVM start")
    try:
        native_conf = session_conf(plan)  # what native stages need at start: jars, SQL extensions
        native_jars = [j for j in native_conf.pop("spark.jars", "").split(",") if j]
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
                **_with_jars(engine.conf, list(dict.fromkeys([*native_jars, *connector_conf]))),
            },
            connect_timeout=10,
            log_level=spark_log_level(),
            on_jvm=lambda: counts.phase("session"),
            python=python,
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


def connectors(config: PipelineConfig) -> list[str]:
    """The jars the run's Hadoop URIs need (``s3a://``: hadoop-aws and the AWS SDK bundle),
    fetched once into the jar cache; a :class:`StateError` saying how to provide them when
    they cannot be fetched."""
    from etlstage.errors import StateError
    from etlstage.spark.jars import JarFetchError, fetch_named

    places = [config.engine.checkpoint, *(a for s in config.stages for a in s.command)]
    if not any(p.startswith("s3a://") for p in places):
        return []
    if "hadoop-aws" in config.engine.conf.get("spark.jars", "") + config.engine.conf.get("spark.jars.packages", ""):
        return []  # the user's own
    try:
        return [str(jar) for jar in fetch_named("s3")]
    except JarFetchError as exc:
        raise StateError(
            f"s3a:// needs hadoop-aws and the AWS SDK bundle: {exc}. Give them in engine.conf "
            "(spark.jars, or spark.jars.packages: org.apache.hadoop:hadoop-aws:<pyspark's Hadoop version>)"
        ) from None


def _with_jars(conf: dict[str, str], jars: list[str]) -> dict[str, str]:
    if not jars:
        return conf
    given = [j for j in conf.get("spark.jars", "").split(",") if j]
    return {**conf, "spark.jars": ",".join([*given, *jars])}


def spark_log_level() -> str:
    """Spark's own log: WARN, unless etlstage logs at DEBUG (``--log-level DEBUG``): then INFO."""
    return "INFO" if logging.getLogger("etlstage").getEffectiveLevel() <= logging.DEBUG else "WARN"


def missing_programs(spark: SparkSession, plan: Plan) -> list[str]:
    """Stages whose program cannot be found where their tasks run, before the query starts:
    on the driver for driver-side extractors, and for every stage under a ``local`` master
    (its tasks run in this host's processes, with this environment); elsewhere by a small
    job with a task per core (which also warms up the Python processes the query reuses)."""
    from etlstage.spark.native import natives
    from etlstage.spark.probe import find_programs, probe_job

    config = plan.config
    native = natives(plan)  # no program of theirs runs
    workers = [s for s in config.stages if s.name not in native]
    on_driver = [s for s in workers if s.type == "E" and not (s.mode == "cyclic" and s.offsets == "supervisor")]
    on_executors = [s for s in workers if s not in on_driver]
    master = config.engine.master
    if master == "local" or master.startswith("local["):
        # a job here was most of a run's pre-flight (about 6 s), even a run with nothing to do
        return find_programs(plan, workers)
    problems = find_programs(plan, on_driver)
    if on_executors:
        problems += probe_job(spark, plan, [s.name for s in on_executors])
    return problems


def run_in(spark: SparkSession, plan: Plan, *, progress: bool = True, counts: Counts | None = None) -> int:
    """Run ``plan``'s query in an existing session until it ends; print the summary."""
    from etlstage.spark.session import active_in_this_thread

    with active_in_this_thread(spark):  # where Spark looks the engine's source and sink up
        return _run(spark, plan, progress, counts)


def _run(spark: SparkSession, plan: Plan, progress: bool, counts: Counts | None) -> int:
    from etlstage.spark.driver_inbox import driver_inbox
    from etlstage.spark.replay import replay_deadletters
    from etlstage.spark.shipping import ship
    from etlstage.spark.sink import LoadSink
    from etlstage.spark.source import ExtractSource

    config = plan.config
    counts = counts or Counts(config, plan.run_id)
    counts.phase("pre-flight job")
    try:
        if is_local(config.engine.checkpoint):  # a URI's checkpoint is Spark's to check
            check_checkpoint(plan.checkpoint)
        packs = own_path(config, "ship")
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

    counts.phase("query start")
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
    inbox = driver_inbox(plan, *_inbox_places(spark)).__enter__()  # tasks reach the driver's files there
    plan = dataclasses.replace(plan, inbox=inbox.address)
    restore = _on_signals(stop)
    try:
        if is_local(config.engine.checkpoint):
            remove_abandoned(config.engine.checkpoint)
        replay_deadletters(spark, plan)  # before new data, as the supervisor injects them first
        query = build(spark, plan).start()
        counts.phase("first micro-batch")
        reporter = counts.reporter(progress)
        while not query.awaitTermination(1):
            reporter()
            if stop.is_set():
                counts.state = "draining"
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
        counts.phase(None)  # a run that ends before its first micro-batch: its start-up ends here
        counts.state = "failed" if code else counts.state  # what the metrics written at the end say
        with contextlib.suppress(Exception):  # a JVM that is gone cannot report any more
            counts.finish(query)
            spark.streams.removeListener(counts.listener())
        _retire_workers(spark, plan)
        inbox.__exit__(None, None, None)
    print(counts.summary(), file=sys.stderr)
    return code


def _inbox_places(spark: SparkSession) -> tuple[str, str]:
    """(address the driver's inbox listens on, host the tasks reach it at): loopback for a
    local master; else the address of the host Spark's executors reach the driver at
    (``spark.driver.bindAddress`` when set, as Spark's own driver port; through Spark
    Connect the client's host, whose executors reach the client), never every interface."""
    from etlstage.spark.session import is_connect

    master = str(spark.conf.get("spark.master", "") or "")
    if master.startswith("local"):
        return "127.0.0.1", "127.0.0.1"
    if is_connect(spark):
        host = socket.getfqdn()
        return listen_address(host), host
    host = str(spark.conf.get("spark.driver.host", "") or socket.getfqdn())
    return str(spark.conf.get("spark.driver.bindAddress", "") or listen_address(host)), host


def listen_address(host: str) -> str:
    """The local address ``host`` names (the inbox listens there only); ``host`` itself
    when it does not resolve (the inbox then says so and listens on every interface)."""
    try:
        return str(socket.getaddrinfo(host, None, socket.AF_INET, socket.SOCK_STREAM)[0][4][0])
    except (OSError, IndexError):
        return host


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


__all__ = ["build", "explain", "run_in", "run_query"]
