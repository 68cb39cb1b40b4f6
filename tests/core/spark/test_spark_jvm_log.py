"""The driver JVM's stderr through the log: Spark's start-up noise at DEBUG, the rest at its own level."""

from __future__ import annotations

import io
import logging

import pytest

from etlstage.spark.setup import jvm_log
from tests.support.waiting import wait_for

START = """\
WARNING: Using incubator modules: jdk.incubator.vector
Using Spark's default log4j profile: org/apache/spark/log4j2-defaults.properties
26/12/02 04:47:47 WARN Utils: Your hostname, vm, resolves to a loopback address: 127.0.0.1; using 192.0.2.2 instead
26/12/02 04:47:47 WARN Utils: Set SPARK_LOCAL_IP if you need to bind to another address
26/12/02 04:47:57 WARN NativeCodeLoader: Unable to load native-hadoop library for your platform... using builtin-java
Setting default log level to "WARN".
To adjust logging level use sc.setLogLevel(newLevel). For SparkR, use setLogLevel(newLevel).
26/12/04 17:34:35 WARN SparkStringUtils: Truncated the string representation of a plan since it was too large. This behavior can be adjusted by setting 'spark.sql.debug.maxToStringFields'.
26/12/02 04:48:10 ERROR Executor: Exception in task 0.0 in stage 1.0 (TID 1)
java.lang.IllegalStateException: boom
\tat org.example.Thing.run(Thing.java:1)
26/12/02 04:48:11 WARN TaskSetManager: Lost task 0.0 in stage 1.0 (TID 1): boom
Traceback (most recent call last):
[t#0] a worker's own line
"""


def test_start_up_noise_goes_at_debug_and_the_rest_at_its_level(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.DEBUG, logger="etlstage.spark.jvm"):
        jvm_log.relay(io.BytesIO(START.encode())).join(10)
    said = [(r.levelno, r.getMessage()) for r in caplog.records if r.name == "etlstage.spark.jvm"]
    levels = [level for level, _ in said]
    assert levels == [logging.DEBUG] * 8 + [logging.ERROR] + [logging.DEBUG] * 2 + [logging.WARNING, logging.DEBUG] + [
        logging.INFO
    ]
    assert said[-2] == (logging.DEBUG, "Traceback (most recent call last):")  # an exception's: the stack at DEBUG
    assert said[-1] == (logging.INFO, "[t#0] a worker's own line")  # a worker's: INFO, as the supervisor
    assert said[8][1] == "Executor: Exception in task 0.0 in stage 1.0 (TID 1)"  # the date is the record's own
    assert said[10] == (logging.DEBUG, "\tat org.example.Thing.run(Thing.java:1)")


def test_a_python_traceback_inside_a_log_line_is_cut_there(caplog: pytest.LogCaptureFixture) -> None:
    line = "26/12/02 04:48:10 ERROR PythonRunner: Python worker: Traceback (most recent call last):\n"
    with caplog.at_level(logging.DEBUG, logger="etlstage.spark.jvm"):
        jvm_log.relay(io.BytesIO(line.encode())).join(10)
    said = [(r.levelno, r.getMessage()) for r in caplog.records if r.name == "etlstage.spark.jvm"]
    assert said == [(logging.ERROR, "PythonRunner: Python worker: (a traceback: --log-level DEBUG shows it)")]


@pytest.mark.slow  # the shared session's JVM
def test_the_sessions_jvm_writes_through_the_log(spark, caplog: pytest.LogCaptureFixture) -> None:
    """A session started by the project's start_session (the fixture's) relays its JVM's stderr."""
    logger = spark._jvm.org.apache.logging.log4j.LogManager.getLogger("etlstage.Probe")
    with caplog.at_level(logging.DEBUG, logger="etlstage.spark.jvm"):
        logger.warn("a warning of the JVM's own")
        logger.warn("Unable to load native-hadoop library for your platform (said again)")

        def relayed() -> dict[str, int]:
            return {r.getMessage(): r.levelno for r in caplog.records if "Probe:" in r.getMessage()}

        seen = wait_for(lambda: len(relayed()) == 2 and relayed(), 30, "the JVM's two lines in the log")
    assert seen == {
        "Probe: a warning of the JVM's own": logging.WARNING,
        "Probe: Unable to load native-hadoop library for your platform (said again)": logging.DEBUG,
    }
