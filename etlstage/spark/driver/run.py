"""Run the pipeline's query: services, the session, the pre-flight checks, the loop that
waits for the query, signals, and the summary at its end (:mod:`build` builds the query)."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import signal
import socket
import sys
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from etlstage.config.model import PipelineConfig
from etlstage.errors import EtlstageError
from etlstage.spark.checkpoint import check_checkpoint, is_local, own_path, remove_abandoned
from etlstage.spark.driver.build import build
from etlstage.spark.driver.explain import explain
from etlstage.spark.driver.report import Counts
from etlstage.state.store import ensure_private_dir

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming import StreamingQuery

    from etlstage.spark.tasks.plan import Plan

log = logging.getLogger("etlstage.spark")

ENGINE_CONF = {
    "spark.sql.adaptive.enabled": "false",  # not used by streaming queries; Spark warns when it is on
    # the checkpoint's files hold message data: owner-only (0600, folders 0700), like the state directory
    "spark.hadoop.fs.permissions.umask-mode": "077",
}


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
    from etlstage.spark.setup.spark_session import SparkStartError, require_pyspark

    try:
        require_pyspark()
    except SparkStartError as exc:
        log.error("%s", exc)
        return exc.exit_code
    from etlstage.spark.driver.services import running_services

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
    from etlstage.spark.driver.idle import nothing_new
    from etlstage.spark.driver.native import session_conf
    from etlstage.spark.setup.spark_session import SparkStartError, start_session
    from etlstage.spark.setup.worker_python import spark_python
    from etlstage.spark.tasks.plan import Plan

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
    counts = Counts(config, plan.run_id)
    try:
        python = spark_python(engine.master, config.state_dir)
    except EtlstageError as exc:
        log.error("%s", exc)
        return exc.exit_code
    try:
        stop_http = attach(counts) if attach else lambda: None  # a port in use stops the run at once
    except EtlstageError as exc:
        log.error("%s", exc)
        return exc.exit_code
    try:
        idle = nothing_new(plan)
    except EtlstageError as exc:  # a native factory that does not load
        stop_http()
        log.error("%s", exc)
        return exc.exit_code
    if idle is not None:
        log.info("nothing new to load: %s; Spark not started", idle)
        counts.no_query = "nothing new to load, Spark not started"
        stop_http()  # the metrics export writes the run's (zero) figures
        print(counts.summary(), file=sys.stderr)
        return 0
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
    from etlstage.spark.setup.jars import JarFetchError, fetch_named

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
    from etlstage.spark.driver.native import natives
    from etlstage.spark.driver.probe import find_programs, probe_job

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
    from etlstage.spark.setup.spark_session import active_in_this_thread

    with active_in_this_thread(spark):  # where Spark looks the engine's source and sink up
        return _run(spark, plan, progress, counts)


def _run(spark: SparkSession, plan: Plan, progress: bool, counts: Counts | None) -> int:
    from etlstage.spark.driver.driver_requests import open_driver_line
    from etlstage.spark.driver.replay import replay_deadletters
    from etlstage.spark.setup.shipping import ship
    from etlstage.spark.tasks.sink import LoadSink
    from etlstage.spark.tasks.source import ExtractSource

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
    # Spark asks a Python process about each Python data source it registers: 0.6-1.3 s each
    # on 2 cores, a phase of its own (it had passed for the pre-flight job's time)
    counts.phase("data sources")
    spark.dataSource.register(ExtractSource)
    spark.dataSource.register(LoadSink)
    from etlstage.spark.driver.native import natives

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
    line = open_driver_line(plan, *_line_places(spark)).__enter__()  # tasks reach the driver's files there
    plan = dataclasses.replace(plan, driver_line=line.address)
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
        line.__exit__(None, None, None)
    print(counts.summary(), file=sys.stderr)
    return code


def _line_places(spark: SparkSession) -> tuple[str, str]:
    """(address the driver line listens on, host the tasks reach it at): loopback for a
    local master; else the address of the host Spark's executors reach the driver at
    (``spark.driver.bindAddress`` when set, as Spark's own driver port; through Spark
    Connect the client's host, whose executors reach the client), never every interface."""
    from etlstage.spark.setup.spark_session import is_connect

    master = str(spark.conf.get("spark.master", "") or "")
    if master.startswith("local"):
        return "127.0.0.1", "127.0.0.1"
    if is_connect(spark):
        host = socket.getfqdn()
        return listen_address(host), host
    host = str(spark.conf.get("spark.driver.host", "") or socket.getfqdn())
    return str(spark.conf.get("spark.driver.bindAddress", "") or listen_address(host)), host


def listen_address(host: str) -> str:
    """The local address ``host`` names (the driver line listens there only); ``host`` itself
    when it does not resolve (the driver line then says so and listens on every interface)."""
    try:
        return str(socket.getaddrinfo(host, None, socket.AF_INET, socket.SOCK_STREAM)[0][4][0])
    except (OSError, IndexError):
        return host


def _retire_workers(spark: SparkSession, plan: Plan) -> None:
    """Through Spark Connect the server's Python processes, and the workers they run,
    outlive this query: ask them to stop the run's workers now, not at Spark's idle timeout."""
    from etlstage.spark.driver.probe import retire_job
    from etlstage.spark.setup.spark_session import is_connect

    if not is_connect(spark):
        return  # stopping the session ends its executors' Python processes, and their workers
    try:
        hosts = retire_job(spark, plan.run_id)
        log.info("the query's workers stop on %s", ", ".join(hosts))
    except Exception as exc:  # the server is gone: its Python processes, and the workers, with it
        log.warning("could not ask the Spark Connect server to stop the workers: %s", explain(exc))


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


__all__ = ["ENGINE_CONF", "run_in", "run_query"]
