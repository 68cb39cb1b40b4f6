"""Java packages from Maven Central, fetched once into a cache that the next run finds.

Spark's own ``spark.jars.packages`` resolves through Ivy at session start, on every
node, every run; here the project resolves a package set once with Maven
(``mvn dependency:copy-dependencies``), keeps the jars in a folder per set and hands
Spark the file list (``spark.jars``). The same cache serves other JVM programs the
tests start (a Kafka broker, say): :func:`fetch` with ``beside_spark=False``.

The cache folder is ``$ETLSTAGE_JAR_CACHE`` or ``~/.cache/etlstage/jars``; a set is
complete once its ``jars.txt`` is written (last, by rename), so a fetch killed halfway
is simply done again.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

MANIFEST = "jars.txt"
_VERSIONED_JAR = re.compile(r"^(?P<artifact>.+?)-\d[\w.+-]*\.jar$")


class JarFetchError(RuntimeError):
    """The jars of a package set could not be fetched (the message says which and why)."""


def cache_root() -> Path:
    return Path(os.environ.get("ETLSTAGE_JAR_CACHE") or Path.home() / ".cache" / "etlstage" / "jars")


def spark_jars_dir() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent / "jars"


def spark_version() -> str:
    import pyspark

    return pyspark.__version__


def hadoop_version() -> str:
    """The Hadoop version pyspark bundles (``hadoop-client-api-<v>.jar``): connectors such
    as hadoop-aws must match it exactly."""
    for jar in spark_jars_dir().glob("hadoop-client-api-*.jar"):
        return jar.name[len("hadoop-client-api-") : -len(".jar")]
    raise JarFetchError(f"no hadoop-client-api jar in {spark_jars_dir()}: cannot tell pyspark's Hadoop version")


def artifact_of(jar_name: str) -> str:
    """``bundle-2.35.4.jar`` -> ``bundle``."""
    found = _VERSIONED_JAR.match(jar_name)
    return found["artifact"] if found else jar_name.removesuffix(".jar")


def s3_connector() -> list[str]:
    """S3A (``s3a://``): hadoop-aws at the Hadoop version pyspark bundles; its POM names
    the AWS SDK bundle, which comes with it."""
    return [f"org.apache.hadoop:hadoop-aws:{hadoop_version()}"]


DELTA_VERSION = "4.4.0"  # built for Spark 4.0-4.2; no Delta release runs on Spark 4.3 yet


def delta_lake() -> list[str]:
    """Delta Lake for the Spark that pyspark is (``delta-spark_<spark major.minor>_2.13``);
    ``delta-storage`` comes with it."""
    spark = ".".join(spark_version().split(".")[:2])
    return [f"io.delta:delta-spark_{spark}_2.13:{DELTA_VERSION}"]


# delta-storage-s3-dynamodb compiles against AWS SDK v1 (com.amazonaws, "provided" in its POM:
# not fetched with it) at this version; hadoop-aws 3.4 uses SDK v2 (software.amazon.awssdk),
# other packages, so the two sit side by side on one class path.
AWS_SDK_V1_VERSION = "1.12.262"


def delta_dynamodb() -> list[str]:
    """Delta's DynamoDB log store for S3 (``io.delta.storage.S3DynamoDBLogStore``: several
    writers of one S3 table) and the AWS SDK v1 DynamoDB client it calls."""
    return [
        f"io.delta:delta-storage-s3-dynamodb:{DELTA_VERSION}",
        f"com.amazonaws:aws-java-sdk-dynamodb:{AWS_SDK_V1_VERSION}",
    ]


def kafka_connector() -> list[str]:
    """Spark's own Kafka source and sink, at exactly pyspark's version (Scala 2.13)."""
    return [f"org.apache.spark:spark-sql-kafka-0-10_2.13:{spark_version()}"]


KAFKA_BROKER_VERSION = "4.4.0"


def kafka_broker() -> list[str]:
    """Apache Kafka's broker (KRaft), a program of its own: not put beside Spark."""
    return [f"org.apache.kafka:kafka_2.13:{KAFKA_BROKER_VERSION}"]


# Named package sets, for the run and for pre-fetching (tests/support/downloads.py).
PACKAGES: dict[str, Callable[[], list[str]]] = {
    "s3": s3_connector,
    "delta": delta_lake,
    "delta-dynamodb": delta_dynamodb,
    "kafka-spark": kafka_connector,
    "kafka-broker": kafka_broker,
}
ALONE = {"kafka-broker"}  # sets for a JVM program that is not Spark: fetched whole


def fetch_named(name: str) -> list[Path]:
    if name not in PACKAGES:
        raise JarFetchError(f"package set {name!r}: expected one of {', '.join(sorted(PACKAGES))}")
    return fetch(PACKAGES[name](), beside_spark=name not in ALONE)


def fetch(coordinates: Sequence[str], *, beside_spark: bool = True, timeout: float = 900) -> list[Path]:
    """The jars of ``coordinates`` (``group:artifact:version``) and their runtime
    dependencies, fetched on first use. With ``beside_spark``, jars whose artifact pyspark
    already ships are left out (two versions of one library on a classpath is a
    ``NoSuchMethodError`` waiting to happen)."""
    beside = f"beside pyspark {spark_version()}" if beside_spark else "alone"
    key = hashlib.sha256("\n".join([*sorted(coordinates), beside]).encode()).hexdigest()[:16]
    folder = cache_root() / key
    manifest = folder / MANIFEST
    if manifest.exists():
        jars = [folder / name for name in manifest.read_text().split()]
        if all(jar.exists() for jar in jars):
            return jars
    if shutil.which("mvn") is None:
        raise JarFetchError(
            f"Maven (mvn) is not installed: it fetches {', '.join(coordinates)}; install Maven, "
            "or put the jars in a folder and set ETLSTAGE_JAR_CACHE to a cache that holds them"
        )
    folder.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="etlstage-mvn-") as work:
        Path(work, "pom.xml").write_text(_pom(coordinates))
        out = Path(work, "jars")
        try:
            done = subprocess.run(
                ["mvn", "-q", "-B", "dependency:copy-dependencies", f"-DoutputDirectory={out}"]
                + ["-DincludeScope=runtime"],
                cwd=work,
                capture_output=True,
                text=True,
                timeout=timeout,
            )
        except subprocess.TimeoutExpired as exc:
            raise JarFetchError(f"fetching {', '.join(coordinates)} took over {timeout:.0f} s") from exc
        if done.returncode != 0:
            tail = (done.stdout + done.stderr)[-2000:]
            raise JarFetchError(f"mvn could not fetch {', '.join(coordinates)}:\n{tail}")
        shipped = {artifact_of(jar.name) for jar in spark_jars_dir().glob("*.jar")} if beside_spark else set()
        kept = sorted(jar.name for jar in out.glob("*.jar") if artifact_of(jar.name) not in shipped)
        for name in kept:
            os.replace(out / name, folder / name)
    partial = folder / (MANIFEST + ".part")
    partial.write_text("\n".join(kept) + "\n")
    os.replace(partial, manifest)
    return [folder / name for name in kept]


def _pom(coordinates: Sequence[str]) -> str:
    deps = []
    for coordinate in coordinates:
        parts = coordinate.split(":")
        if len(parts) != 3 or not all(parts):
            raise JarFetchError(f"Maven coordinate {coordinate!r}: expected group:artifact:version")
        group, artifact, version = parts
        deps.append(
            f"<dependency><groupId>{group}</groupId><artifactId>{artifact}</artifactId>"
            f"<version>{version}</version></dependency>"
        )
    return (
        '<project xmlns="http://maven.apache.org/POM/4.0.0"><modelVersion>4.0.0</modelVersion>'
        "<groupId>etlstage</groupId><artifactId>jar-fetch</artifactId><version>1</version>"
        f"<packaging>pom</packaging><dependencies>{''.join(deps)}</dependencies></project>"
    )
