"""Starting Spark: checks that name the cause and the fix, then one SparkSession.

Used by the Spark engine and the stock Spark loader.  A worker calls
:func:`start_session` from ``setup()``: by then the SDK has pointed file descriptor 1
at stderr, so the JVM that Spark launches inherits a harmless stdout.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import socket
import subprocess
import sys
import threading
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from etlstage.errors import EtlstageError
from etlstage.spark.setup import cds, jvm_log

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger("etlstage.spark")

DEFAULT_CONF = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
}


class SparkStartError(EtlstageError):
    """Spark cannot start: the message names the cause and the fix."""

    exit_code = 2


def check_java() -> str:
    """The java executable Spark will use, after running it once."""
    java = find_java()
    try:
        done = subprocess.run([java, "-version"], capture_output=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise SparkStartError(f"cannot run {java} -version ({exc}): fix the Java installation") from None
    if done.returncode != 0:
        raise SparkStartError(f"{java} -version failed: {done.stderr.decode(errors='replace').strip()[:300]}")
    return f"{java} ({java_version(done.stderr.decode(errors='replace'))})"


def find_java() -> str:
    """The java executable Spark will use (JAVA_HOME's, else PATH's), without running it."""
    home = os.environ.get("JAVA_HOME")
    if home:
        java = os.path.join(home, "bin", "java")
        if not os.access(java, os.X_OK):
            raise SparkStartError(
                f"JAVA_HOME={home!r} has no executable bin/java: point JAVA_HOME at a JDK/JRE 17+ "
                "(e.g. /usr/lib/jvm/java-17-openjdk-amd64) or unset it to use java from PATH"
            )
    else:
        found = shutil.which("java")
        if not found:
            raise SparkStartError(
                "Spark needs Java (17 or newer) but `java` is not on PATH and JAVA_HOME is not set: "
                "install a JRE (e.g. `apt-get install openjdk-17-jre-headless`) or set JAVA_HOME"
            )
        java = found
    return java


def java_version(said: str) -> str:
    """The first line of ``java -version``'s output that is not the JVM repeating options
    it picked up from the environment (JAVA_TOOL_OPTIONS, JDK_JAVA_OPTIONS, _JAVA_OPTIONS)."""
    for line in said.splitlines():
        if not line.startswith(("Picked up ", "NOTE: Picked up ")):
            return line
    return "unknown version"


def check_master_reachable(master: str, timeout: float) -> None:
    """For ``spark://`` and ``sc://`` masters: a TCP connection within ``timeout`` seconds."""
    if not master.startswith(("spark://", "sc://")):
        return
    default_port = 7077 if master.startswith("spark://") else 15002
    targets: list[tuple[str, int]] = []
    for hostport in urlsplit(master).netloc.split(","):  # spark://h1:7077,h2:7077 (standby masters)
        host, _, port = hostport.rpartition(":") if ":" in hostport else (hostport, "", "")
        try:
            targets.append((host or hostport, int(port) if port else default_port))
        except ValueError:
            raise SparkStartError(f"--master {master!r}: port {port!r} is not a number") from None
    errors = []
    for host, port_number in targets:
        try:
            with socket.create_connection((host, port_number), timeout=timeout):
                return
        except OSError as exc:
            errors.append(f"{host}:{port_number}: {exc.strerror or exc}")
    raise SparkStartError(
        f"cannot reach the Spark master {master} within {timeout:g}s ({'; '.join(errors)}): "
        "start the master, or fix --master (e.g. local[*] to run Spark inside the loader)"
    )


def require_pyspark() -> None:
    """pyspark (with pandas and pyarrow, which mapInArrow needs) importable, or a clear error."""
    for module in ("pyspark", "pyarrow", "pandas"):
        try:
            __import__(module)
        except ImportError as exc:
            raise SparkStartError(
                f"{module} is not installed ({exc}): the Spark engine needs pip install 'etlstage[spark]'"
            ) from None


class _NotPy4j(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return "/py4j/" not in record.pathname or record.levelno >= logging.ERROR


def quiet_spark() -> None:
    """Spark's own chatter stays out of the pipeline's log (its log level is WARN)."""
    logging.getLogger("py4j").setLevel(logging.WARNING)
    for handler in logging.getLogger().handlers:  # py4j also logs through the root logger
        if not any(isinstance(f, _NotPy4j) for f in handler.filters):
            handler.addFilter(_NotPy4j())
    # pyspark warns on every Python process that it was not tried with pandas 3; we use Arrow only.
    hush = "ignore:PySpark does not yet fully support pandas"
    warnings.filterwarnings("ignore", message="PySpark does not yet fully support pandas")
    current = os.environ.get("PYTHONWARNINGS")
    if hush not in (current or ""):
        os.environ["PYTHONWARNINGS"] = f"{current},{hush}" if current else hush


def start_session(
    master: str,
    app_name: str,
    conf: dict[str, str],
    *,
    connect_timeout: float,
    log_level: str,
    on_jvm: Callable[[], None] = lambda: None,
    python: str | None = None,
) -> SparkSession:
    """One SparkSession for the life of this process; ``on_jvm`` is called once its JVM runs;
    ``python`` is what Spark's Python processes run (default: this Python)."""
    quiet_spark()
    try:
        from pyspark.sql import SparkSession
    except ImportError as exc:
        raise SparkStartError(f"pyspark is not installed ({exc}): pip install 'etlstage[spark]'") from None
    check_master_reachable(master, connect_timeout)
    if master.startswith("sc://"):
        return _start_connect(master, app_name, conf)
    java = check_java()
    log.info("Spark: using %s", java)
    # Spark's Python processes run `python3` from PATH unless told: with etlstage in a venv
    # not activated (`.venv/bin/etlstage`, a service's unit), that Python lacks etlstage
    # and pyspark, and every task fails in Spark's worker.py.  This Python has both.
    os.environ.setdefault("PYSPARK_PYTHON", python or sys.executable)
    from pyspark import SparkContext

    if SparkContext._gateway is None:  # this process starts its JVM now (else its options are set)
        conf = cds.with_options(conf, cds.java_options(java, conf))
    builder = SparkSession.builder.master(master).appName(app_name)
    for key, value in {**DEFAULT_CONF, **conf}.items():
        builder = builder.config(key, value)
    try:
        _launch_jvm({"spark.master": master, "spark.app.name": app_name, **DEFAULT_CONF, **conf})
        on_jvm()
        spark = builder.getOrCreate()
    except Exception as exc:
        raise SparkStartError(f"Spark did not start with --master {master}: {_first_line(exc)}") from None
    spark.sparkContext.setLogLevel(log_level)
    if master.startswith("spark://"):
        _probe_executors(spark, master, connect_timeout * 6)
    return spark


PRIVATE_PREFIXES = ("spark.executorEnv.",)  # values a service exports: credentials among them
# engine.conf keys that hold a secret (Spark's own spark.redaction.regex, and Azure's
# account keys): set over the gateway too, never on the JVM's command line
SECRET_KEY = re.compile(r"(?i)secret|password|token|access[.]key|account[.]key")


def is_private(key: str) -> bool:
    """Whether setting ``key`` must stay off ``spark-submit``'s command line."""
    return key.startswith(PRIVATE_PREFIXES) or bool(SECRET_KEY.search(key))


def _launch_jvm(conf: dict[str, str]) -> None:
    """Start Spark's JVM with ``conf`` less its private settings: pyspark hands what it starts
    the JVM with to ``spark-submit`` as ``--conf k=v`` arguments, which every user of the host
    can read (``ps``).  The private ones reach the SparkContext over the gateway's socket
    instead, when the session is created (the builder holds them all)."""
    from pyspark import SparkConf, SparkContext

    if SparkContext._gateway is not None:
        return  # started already (a session earlier in this process)
    from pyspark.java_gateway import launch_gateway

    public = SparkConf(loadDefaults=False)
    for key, value in conf.items():
        if not is_private(key):
            public.set(key, value)
    # The JVM's stderr goes through this process's log (jvm_log: its start-up noise at
    # DEBUG); the pipe is read from before the JVM starts, so it never fills and blocks it.
    read_end, write_end = os.pipe()
    jvm_log.relay(os.fdopen(read_end, "rb"))
    try:
        gateway = launch_gateway(public, popen_kwargs={"stderr": write_end})
    finally:
        os.close(write_end)
    SparkContext._ensure_initialized(gateway=gateway, conf=public)


def _start_connect(master: str, app_name: str, conf: dict[str, str]) -> SparkSession:
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.remote(master).appName(app_name)
    for key, value in conf.items():
        builder = builder.config(key, value)
    try:
        with warnings.catch_warnings(record=True) as refused:
            warnings.simplefilter("always")
            spark = builder.getOrCreate()
        for warning in refused:  # settings only the server's start can make (spark.cores.max, ...)
            text = str(warning.message).split(" due to ")[0]
            log.warning("Spark Connect server %s: %s (set it where the server starts)", master, text)
        return spark
    except ImportError as exc:
        raise SparkStartError(f"Spark Connect needs extra packages ({exc}): pip install 'pyspark[connect]'") from None
    except Exception as exc:
        raise SparkStartError(f"Spark Connect server {master} refused the session: {_first_line(exc)}") from None


PROBE_RECHECK = 0.5  # seconds between cancels of a probe job past its deadline


def _probe_executors(spark: SparkSession, master: str, timeout: float) -> None:
    """A tiny job: a cluster with no free worker would otherwise hang on the first batch.

    The job is cancelled once ``timeout`` has passed, and again each :data:`PROBE_RECHECK`
    seconds until the probe returns: on a slow machine the job may be submitted only after
    the first cancel, which then finds nothing to cancel, and the job would wait forever."""
    sc = spark.sparkContext
    group = "etlstage-probe"
    done = threading.Event()

    def cancel_when_late() -> None:
        if done.wait(timeout):
            return
        while not done.is_set():
            with suppress(Exception):  # a context stopping under it
                if sc.statusTracker().getJobIdsForGroup(group):
                    sc.cancelJobGroup(group)
            done.wait(PROBE_RECHECK)

    sc.setJobGroup(group, "start-up probe", interruptOnCancel=True)
    canceller = threading.Thread(target=cancel_when_late, name="etlstage-probe-deadline", daemon=True)
    canceller.start()
    try:
        spark.range(2, numPartitions=1).count()
    except Exception:
        raise SparkStartError(
            f"the master {master} accepted the application but no executor ran a task within {timeout:g}s: "
            "start a worker (spark-class org.apache.spark.deploy.worker.Worker <master>) or free cores/memory"
        ) from None
    finally:
        done.set()
        canceller.join()
        sc.setLocalProperty("spark.jobGroup.id", None)  # type: ignore[arg-type]


def is_connect(spark: SparkSession) -> bool:
    """A Spark Connect session: no SparkContext on this side, only the server's."""
    return type(spark).__module__.startswith("pyspark.sql.connect")


@contextmanager
def active_in_this_thread(spark: SparkSession) -> Iterator[None]:
    """``spark`` is the calling thread's active session in the JVM while the block runs.

    Spark finds a Python data source by name through the calling thread's active session,
    not the session that registered it: a thread whose active session is another (a
    notebook's second session) or none (a JVM thread py4j made anew) gets
    DATA_SOURCE_NOT_FOUND for the engine's own source and sink.  The thread's previous
    active session is put back afterwards.  A Connect session has no JVM on this side:
    its server keeps one session per client."""
    if is_connect(spark):
        yield
        return
    jsession = getattr(spark._jvm, "org.apache.spark.sql.classic.SparkSession")  # as pyspark reaches it
    previous = jsession.getActiveSession()
    jsession.setActiveSession(spark._jsparkSession)
    try:
        yield
    finally:
        with suppress(Exception):  # a JVM gone (with a signal to the whole group) has no session to put back
            if previous.isDefined():
                jsession.setActiveSession(previous.get())
            else:
                jsession.clearActiveSession()


def default_parallelism(spark: SparkSession) -> int:
    """Spark's default parallelism (the cores it has), also through Spark Connect, where
    there is no SparkContext to ask: a range without a partition count gets as many."""
    if not is_connect(spark):
        return max(1, int(spark.sparkContext.defaultParallelism))
    from pyspark.sql import functions as F

    row = spark.range(0, 1 << 16).select(F.spark_partition_id().alias("p")).agg(F.max("p").alias("n")).first()
    return max(1, int(row.n) + 1) if row is not None else 1


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:400] if text else type(exc).__name__
