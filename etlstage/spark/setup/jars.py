"""Java packages from Maven Central, fetched once into a cache that the next run finds.

Spark's own ``spark.jars.packages`` resolves through Ivy at session start, on every
node, every run; here the project resolves a package set once with Maven
(``mvn dependency:copy-dependencies``), keeps the jars in a folder per set and hands
Spark the file list (``spark.jars``). The same cache serves other JVM programs the
tests start (a Kafka broker, say): :func:`fetch` with ``beside_spark=False``.

The cache folder is ``$ETLSTAGE_JAR_CACHE`` or ``~/.cache/etlstage/jars``; a set is
complete once its ``jars.txt`` is written (last, by rename), so a fetch killed halfway
is simply done again.

A fetch says what it does: what it fetches, from where, into where, then each jar as it
arrives (size, running total) and the total.  The repository (Maven Central, or
``$ETLSTAGE_MAVEN_REPOSITORY``) is asked first, for :data:`PROBE_SECONDS` at most: a
machine that cannot reach it learns so in seconds, with what to do instead
(:data:`REMEDIES`), rather than after Maven's own time-outs.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import shutil
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

log = logging.getLogger("etlstage.spark")

MANIFEST = "jars.txt"
_VERSIONED_JAR = re.compile(r"^(?P<artifact>.+?)-\d[\w.+-]*\.jar$")
CENTRAL = "https://repo.maven.apache.org/maven2"
PROBE_SECONDS = 5.0  # to reach the repository before Maven is started
# Maven 3.8's HTTP wagon: a read that stalls fails after this, and is not retried thrice
MAVEN_TIMEOUTS = ["-Dmaven.wagon.rto=30000", "-Dmaven.wagon.http.retryHandler.count=1"]
REMEDIES = (
    "to go on: let this machine reach it (behind a proxy: a <proxy> in ~/.m2/settings.xml; a mirror: "
    "ETLSTAGE_MAVEN_REPOSITORY=<its URL>, or a <mirror> in ~/.m2/settings.xml); or let Spark fetch them "
    "itself: --conf spark.jars.packages=<the coordinates above>; or put the jars in a folder and name "
    "them: --conf spark.jars=<folder>/a.jar,<folder>/b.jar; or copy a filled cache here "
    "(ETLSTAGE_JAR_CACHE=<its folder>)"
)
_DOWNLOADED = re.compile(r"Downloaded from (?P<repo>\S+): (?P<url>\S+) \((?P<size>[\d.,]+ ?[kMG]?B)")


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


def given_by(conf: dict[str, str], coordinates: Sequence[str]) -> bool:
    """The user's Spark settings bring these packages themselves: ``spark.jars.packages``
    names each (any version), or ``spark.jars`` holds a jar of each artifact."""
    packages = {":".join(p.strip().split(":")[:2]) for p in conf.get("spark.jars.packages", "").split(",")}
    files = {artifact_of(os.path.basename(j.strip())) for j in conf.get("spark.jars", "").split(",")}
    return all(
        ":".join(c.split(":")[:2]) in packages or c.split(":")[1] in files for c in coordinates if c.count(":") == 2
    )


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
    what = ", ".join(coordinates)
    if shutil.which("mvn") is None:
        raise JarFetchError(f"Maven (mvn) is not installed: it fetches {what}; install Maven, or {REMEDIES}")
    repo = repository()
    pom = _pom(coordinates, repo)  # a bad coordinate is named before anything is fetched
    log.info(
        "jars: fetching %s and what they need from %s into %s (once: later runs use the cache)", what, repo, folder
    )
    problem = "" if _maven_settings_decide() else probe(repo)
    folder.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="etlstage-mvn-") as work:
        Path(work, "pom.xml").write_text(pom)
        out = Path(work, "jars")
        argv = ["mvn", "-B", "dependency:copy-dependencies", f"-DoutputDirectory={out}", "-DincludeScope=runtime"]
        if problem:  # Maven's own local repository may hold them all (with what they need): offline then
            offline = _in_local_repository(coordinates)
            code, said = _run_maven([*argv, "--offline"], work, timeout) if offline else (1, "")
            if code != 0:
                raise JarFetchError(f"cannot reach the Maven repository {repo} ({problem}) to fetch {what}; {REMEDIES}")
        else:
            code, said = _run_maven([*argv, *MAVEN_TIMEOUTS], work, timeout)
        if code is None:
            raise JarFetchError(f"fetching {what} from {repo} took over {timeout:.0f} s; {REMEDIES}")
        if code != 0:
            raise JarFetchError(f"mvn could not fetch {what} from {repo}:\n{said[-2000:]}\n{REMEDIES}")
        shipped = {artifact_of(jar.name) for jar in spark_jars_dir().glob("*.jar")} if beside_spark else set()
        kept = sorted(jar.name for jar in out.glob("*.jar") if artifact_of(jar.name) not in shipped)
        for name in kept:
            os.replace(out / name, folder / name)
    partial = folder / (MANIFEST + ".part")
    partial.write_text("\n".join(kept) + "\n")
    os.replace(partial, manifest)
    size = sum((folder / name).stat().st_size for name in kept)
    log.info("jars: %d jars (%.1f MB) in %s", len(kept), size / 1e6, folder)
    return [folder / name for name in kept]


def _in_local_repository(coordinates: Sequence[str]) -> bool:
    """Maven's local repository (``~/.m2/repository``) holds each coordinate's own jar."""
    local = Path.home() / ".m2" / "repository"
    for coordinate in coordinates:
        group, artifact, version = coordinate.split(":")
        if not (local / group.replace(".", "/") / artifact / version / f"{artifact}-{version}.jar").is_file():
            return False
    return True


def repository() -> str:
    """Where Maven fetches from: ``$ETLSTAGE_MAVEN_REPOSITORY`` (a mirror), else Maven Central."""
    return (os.environ.get("ETLSTAGE_MAVEN_REPOSITORY") or CENTRAL).rstrip("/")


def _maven_settings_decide() -> bool:
    """The user's Maven settings name a mirror or a proxy: Maven, not this process, knows the way."""
    settings = Path.home() / ".m2" / "settings.xml"
    try:
        text = settings.read_text(errors="replace")
    except OSError:
        return False
    return "<mirror>" in text or "<proxy>" in text


def probe(url: str, timeout: float = PROBE_SECONDS) -> str:
    """ "" when ``url`` answers over HTTP within ``timeout`` seconds (any status: a repository's
    root may well be "not found"); else what went wrong."""
    try:
        with urllib.request.urlopen(urllib.request.Request(url + "/", method="HEAD"), timeout=timeout):
            return ""
    except urllib.error.HTTPError:
        return ""  # it answered
    except urllib.error.URLError as exc:
        return f"{exc.reason}"
    except (OSError, ValueError) as exc:  # a time-out, a reset, a URL it cannot use
        return f"{type(exc).__name__}: {exc}" if str(exc) else f"no answer within {timeout:g} s"


def _run_maven(argv: list[str], cwd: str, timeout: float) -> tuple[int | None, str]:
    """Run Maven, logging each jar it downloads; (exit status or None past ``timeout``, its output)."""
    proc = subprocess.Popen(argv, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    late = threading.Event()

    def stop() -> None:
        late.set()
        proc.kill()

    timer = threading.Timer(timeout, stop)
    timer.start()
    try:
        assert proc.stdout is not None
        said = "".join(progress(proc.stdout))
        code = proc.wait()
    finally:
        timer.cancel()
    return (None if late.is_set() else code), said


def progress(lines: Iterable[str]) -> Iterable[str]:
    """Maven's output passed through, with a log line per jar it downloads (name, size, from
    where, running count and megabytes)."""
    began = time.monotonic()
    jars, total = 0, 0.0
    for line in lines:
        yield line
        found = _DOWNLOADED.search(line)
        if not found or not found["url"].endswith(".jar"):
            continue  # POMs and metadata: many, small
        jars += 1
        total += _megabytes(found["size"])
        name = found["url"].rsplit("/", 1)[-1]
        log.info(
            "jars: %s (%s) from %s [%d jars, %.1f MB, %.0fs]",
            name, found["size"], found["repo"], jars, total, time.monotonic() - began,
        )  # fmt: skip


def _megabytes(size: str) -> float:
    number, unit = re.match(r"([\d.,]+) ?([kMG]?B)", size).groups()  # type: ignore[union-attr]
    return float(number.replace(",", "")) * {"B": 1e-6, "kB": 1e-3, "MB": 1.0, "GB": 1e3}[unit]


def _pom(coordinates: Sequence[str], repo: str = CENTRAL) -> str:
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
        f"<packaging>pom</packaging><dependencies>{''.join(deps)}</dependencies>{_repositories(repo)}</project>"
    )


def _repositories(repo: str) -> str:
    """A mirror in Maven Central's place (its id): for the dependencies and Maven's own plugins."""
    if repo == CENTRAL:
        return ""
    url = repo.replace("&", "&amp;").replace("<", "&lt;")
    one = f"<id>central</id><url>{url}</url>"
    return (
        f"<repositories><repository>{one}</repository></repositories>"
        f"<pluginRepositories><pluginRepository>{one}</pluginRepository></pluginRepositories>"
    )
