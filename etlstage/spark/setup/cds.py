"""Class data sharing for the driver's JVM: the classes a Spark run loads, archived once by
the JVM itself, mapped by every later run with the same Java and class path.

Spark's driver loads some 15,000 classes before its first job; read from an archive they
cost a fraction (docs/performance-spark.md, "Start-up": ``python bench/jvm_cds.py``).  The
first run for a given Java and class path records its classes (``-XX:ArchiveClassesAtExit``:
that run starts slower, once); the archive is written as its JVM exits.  A JVM mapping a
truncated archive dies of SIGBUS, so a recording is taken into use only once the JVM that
wrote it has said so: its log (``-Xlog:cds+dynamic``, to a file beside the archive) ends
with "Written dynamic archive".  A process of its own (the Spark engine's driver) waits up
to :data:`EXIT_WAIT` for that, so that a run in a container that ends with it still
leaves the archive.  A worker (the stock Spark loader) cannot outlive its stop: once it
exits, its engine kills what it started (docs/protocol.md: no orphans), a JVM still
writing among them, and a JVM of Spark's took ~15 s to stop and write its archive on a
2-core machine.  So a worker records only when its engine gives it :data:`RECORD_GRACE`
at least to exit (``ETLSTAGE_STOP_TIMEOUT``, the stage's ``stop_timeout``), and waits for
its JVM within that; with less (the default 10 s) it maps an archive that is there and
records none — it used to record at every run, wait 4 s at its end, lose the archive, and
keep other runs from recording it for ten minutes.  One recording per archive at a time:
a claim file, made with ``O_EXCL``, keeps other runs from recording the same classes
meanwhile.

The archives live in ``$ETLSTAGE_CDS_CACHE`` or ``~/.cache/etlstage/cds`` (owner-only; a
folder others can write to is not used: the JVM would load what is in it), at most
:data:`KEEP` of them.  ``ETLSTAGE_SPARK_CDS=off`` turns it off; so does a user's own
``-Xshare``/``SharedArchiveFile`` in ``spark.driver.extraJavaOptions``.
``ETLSTAGE_SPARK_CDS=map`` maps an archive already there and never records one: for a
cache filled beforehand (an image built with its archive, a test suite whose runs must not
differ by which of them recorded).
"""

from __future__ import annotations

import atexit
import hashlib
import logging
import math
import os
import stat
import time
import uuid
from pathlib import Path

from etlstage.config.model import StageConfig

log = logging.getLogger("etlstage.spark")

OPTIONS_KEY = "spark.driver.extraJavaOptions"
KEEP = 6  # archives kept (one per Java and class path: ~150 MB each)
# the JVM reports on its archive on stdout (classes it skips, a mismatch it falls back
# from): a worker's stdout is the protocol, the CLI's the user's
QUIET = "-Xlog:cds=off -Xlog:cds+dynamic=off"
ABANDONED = 3600.0  # seconds after which a partial archive is a killed JVM's: deleted
RECORDING = 600.0  # seconds a claim to record holds; an older one is a run that died
EXIT_WAIT = 120.0  # seconds a process of its own waits at exit for its JVM to write the archive
RECORD_GRACE = 30.0  # a worker records only when its engine waits this long for it to exit
EXIT_MARGIN = 2.0  # of a worker's grace, kept for its own exit after its JVM's
WRITTEN = b"Written dynamic archive"  # the JVM's log line once the archive is complete
# the class path and what else decides which classes the driver loads
KEY_SETTINGS = ("spark.jars", "spark.driver.extraClassPath", OPTIONS_KEY)


def cache_dir() -> Path:
    return Path(os.environ.get("ETLSTAGE_CDS_CACHE") or Path.home() / ".cache" / "etlstage" / "cds")


def setting() -> str:
    return os.environ.get("ETLSTAGE_SPARK_CDS", "on").lower()


def enabled(conf: dict[str, str]) -> bool:
    if setting() in ("off", "0", "false", "no"):
        return False
    theirs = conf.get(OPTIONS_KEY, "")
    return "Xshare" not in theirs and "SharedArchiveFile" not in theirs and "ArchiveClassesAtExit" not in theirs


def archive_key(java: str, conf: dict[str, str]) -> str:
    """One archive per Java (its path and version) and class path (pyspark's jars where they
    are installed: an archive records its jars' paths, and a JVM whose class path differs
    maps nothing; the extra jars)."""
    import pyspark

    installed = os.path.dirname(os.path.abspath(pyspark.__file__))
    parts = [java, pyspark.__version__, installed, *(f"{k}={conf.get(k, '')}" for k in KEY_SETTINGS)]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:20]


def private_dir(folder: Path) -> bool:
    """``folder`` exists (made owner-only if missing), is ours and no one else can write to it."""
    try:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        st = folder.lstat()
    except OSError as exc:
        log.debug("class data sharing off: %s: %s", folder, exc)
        return False
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o022:
        log.warning("class data sharing off: %s is not a folder only this user can write to", folder)
        return False
    return True


def java_options(java: str, conf: dict[str, str]) -> str:
    """The JVM options that map this Java and class path's archive, or record it when there
    is none yet; "" when class data sharing is off or cannot be used safely."""
    if not enabled(conf):
        return ""
    folder = cache_dir()
    # Spark splits the options at spaces; -Xlog's file option ends at a colon
    if any(c.isspace() or c in "\"':\\" for c in str(folder)):
        log.debug("class data sharing off: the cache folder %s holds a space, a colon or a quote", folder)
        return ""
    if not private_dir(folder):
        return ""
    _take_finished_into_use(folder)
    _clean_up(folder)
    key = archive_key(java, conf)
    archive = folder / f"{key}.jsa"
    if archive.is_file() and not archive.is_symlink():
        os.utime(archive)  # recently used: kept by the clean-up
        return f"-XX:SharedArchiveFile={archive} -Xshare:auto {QUIET}"
    if setting() == "map":
        log.debug("class data sharing: no archive %s; ETLSTAGE_SPARK_CDS=map records none", archive.name)
        return ""
    grace = worker_grace()
    if grace is not None and grace < RECORD_GRACE:
        log.info(
            "class data sharing: no archive for this Java and class path yet; this worker, given %gs to exit "
            "(stop_timeout), records none: its JVM would be stopped while writing it (give the stage "
            "stop_timeout: %g or more to record it once; docs/spark-engine.md, Start-up)",
            grace,
            RECORD_GRACE,
        )
        return ""
    if not _claim(folder / f"{key}.recording"):
        log.debug("class data sharing: another run is recording %s; this one runs without", archive.name)
        return ""
    part = folder / f"{key}.{uuid.uuid4().hex[:12]}.part"
    atexit.register(_take_into_use, part, archive, os.getpid())
    return f"-XX:ArchiveClassesAtExit={part} {QUIET} -Xlog:cds+dynamic=info:file={_log_of(part)}::filecount=0"


def with_options(conf: dict[str, str], options: str) -> dict[str, str]:
    if not options:
        return conf
    theirs = conf.get(OPTIONS_KEY, "")
    return {**conf, OPTIONS_KEY: f"{theirs} {options}".strip()}


def _log_of(part: Path) -> Path:
    return part.parent / f"{part.name}.log"


def _claim(claim: Path) -> bool:
    """This run records the archive unless another one, alive (its claim is recent), does."""
    for _ in range(2):
        try:
            os.close(os.open(claim, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
            return True
        except FileExistsError:
            try:
                if time.time() - claim.stat().st_mtime < RECORDING:
                    return False
                claim.unlink(missing_ok=True)  # a run that died before its JVM wrote anything
            except OSError:
                return False
        except OSError as exc:
            log.debug("class data sharing: %s: %s", claim, exc)
            return False
    return False


def _take_into_use(part: Path, archive: Path, pid: int) -> None:
    """At exit: end the JVM's input (pyspark's JVM then exits and writes ``part``), wait
    (:func:`exit_wait`), and take the archive into use if the JVM has said it is written.
    A JVM still writing is left to finish: the next run takes its archive into use."""
    from pyspark import SparkContext

    if os.getpid() != pid:  # a forked child exiting: the JVM is its parent's
        return
    gateway = SparkContext._gateway
    proc = getattr(gateway, "proc", None)
    if proc is None:
        return
    wait = exit_wait()
    log.info(
        "class data sharing: Spark's JVM records its classes as it exits (once for this Java and class path; "
        "later runs start faster); waiting up to %.0fs",
        wait,
    )
    try:
        if proc.stdin is not None:
            proc.stdin.close()  # pyspark's JVM exits at end of input: System.exit(0), then the dump
        proc.wait(timeout=wait)
    except Exception as exc:
        log.debug("class data sharing: the JVM is still writing %s (%s); the next run takes it", part.name, exc)
        return
    _take_finished_into_use(archive.parent)


def worker_grace() -> float | None:
    """Seconds this process, a worker, has to exit once its input ends (its engine's
    ``ETLSTAGE_STOP_TIMEOUT``; the stage's default when unsaid or not a number of seconds);
    None when it is no worker."""
    if not os.environ.get("ETLSTAGE_TYPE"):
        return None
    default = StageConfig.stop_timeout
    try:
        grace = float(os.environ.get("ETLSTAGE_STOP_TIMEOUT") or default)
    except ValueError:
        return default
    return grace if math.isfinite(grace) and grace >= 0 else default


def exit_wait() -> float:
    """How long this process waits at exit for its JVM to write the archive: a worker within
    the time its engine gives it to exit."""
    grace = worker_grace()
    return EXIT_WAIT if grace is None else max(0.0, min(EXIT_WAIT, grace - EXIT_MARGIN))


def _take_finished_into_use(folder: Path) -> None:
    """Every recording whose JVM logged that its archive is written becomes that archive."""
    for log_file in folder.glob("*.part.log"):
        part = log_file.with_suffix("")
        key = part.name.split(".", 1)[0]
        try:
            with log_file.open("rb") as f:
                written = WRITTEN in f.read()
            if not written:
                continue
            if part.is_file() and not part.is_symlink() and part.stat().st_size > 0:
                os.replace(part, folder / f"{key}.jsa")
                log.info("class data sharing: archive %s.jsa recorded; later runs start faster", key)
            log_file.unlink(missing_ok=True)
            (folder / f"{key}.recording").unlink(missing_ok=True)
        except OSError as exc:  # another run taking it into use at the same moment
            log.debug("class data sharing: %s: %s", part, exc)


def _clean_up(folder: Path) -> None:
    """The :data:`KEEP` most recently used archives stay; partial ones a killed JVM left go."""
    try:
        archives = sorted(folder.glob("*.jsa"), key=lambda p: p.stat().st_mtime, reverse=True)
        for old in archives[KEEP:]:
            old.unlink(missing_ok=True)
        for left in [*folder.glob("*.part"), *folder.glob("*.part.log")]:
            if time.time() - left.stat().st_mtime > ABANDONED:
                left.unlink(missing_ok=True)
    except OSError as exc:  # another run cleaning up at the same moment
        log.debug("class data sharing: clean-up of %s: %s", folder, exc)


__all__ = ["archive_key", "cache_dir", "enabled", "java_options", "private_dir", "with_options"]
