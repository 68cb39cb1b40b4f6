"""The public API of code that runs Spark itself: a worker that starts its own session
(the stock Spark loader), a native stage, a program that needs Java packages.

Each name is the engine's own implementation, exported here under a stable module so a
worker does not reach into the engine's modules (which may move):

- starting Spark with errors that name the cause and the fix: :func:`start_session`,
  :func:`check_java`, :func:`find_java`, :func:`check_master_reachable`,
  :class:`SparkStartError`; what kind of session one has: :func:`is_connect`,
  :func:`default_parallelism`;
- Java packages from Maven Central, fetched once into a cache: :func:`fetch_named` (a set
  of :data:`PACKAGES`), :func:`given_by` (the user's Spark settings bring them already),
  :class:`JarFetchError`;
- :func:`progress_listener`: a streaming-query listener calling a function with each
  micro-batch's progress;
- :class:`KeepOnce`: a native stage's ``ctx.keep`` (:class:`etlstage.native.Keep`), back
  from its string option (``KeepOnce.from_option(ctx.keep.to_option())``) in a task.

Importing this module imports neither pyspark nor the JVM: each function does when called.
"""

from etlstage.spark.driver.listener import progress_listener
from etlstage.spark.driver_line import KeepOnce
from etlstage.spark.setup.jars import PACKAGES, JarFetchError, fetch_named, given_by
from etlstage.spark.setup.spark_session import (
    SparkStartError,
    check_java,
    check_master_reachable,
    default_parallelism,
    find_java,
    is_connect,
    start_session,
)

__all__ = [
    "PACKAGES",
    "JarFetchError",
    "KeepOnce",
    "SparkStartError",
    "check_java",
    "check_master_reachable",
    "default_parallelism",
    "fetch_named",
    "find_java",
    "given_by",
    "is_connect",
    "progress_listener",
    "start_session",
]
