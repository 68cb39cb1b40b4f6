"""Class data sharing for the driver's JVM: the classes a Spark run loads, archived once by
the JVM itself, mapped by every later run with the same Java and class path.

Spark's driver loads some 15,000 classes before its first job; read from an archive they
cost a fraction (docs/performance-spark.md, "Start-up": ``python bench/jvm_cds.py``).  The
first run for a given Java and class path records its classes (``-XX:ArchiveClassesAtExit``:
that run starts slower, once); the archive is written as its JVM exits, and taken into use
only once that JVM has exited cleanly — a JVM mapping a truncated archive dies of SIGBUS,
so a file still being written, or left by a JVM that was killed, is never used.

The archives live in ``$ETLSTAGE_CDS_CACHE`` or ``~/.cache/etlstage/cds`` (owner-only; a
folder others can write to is not used: the JVM would load what is in it), at most
:data:`KEEP` of them.  ``ETLSTAGE_SPARK_CDS=off`` turns it off; so does a user's own
``-Xshare``/``SharedArchiveFile`` in ``spark.driver.extraJavaOptions``.
"""

from __future__ import annotations

import atexit
import hashlib
import logging
import os
import stat
import uuid
from pathlib import Path

log = logging.getLogger("etlstage.spark")

OPTIONS_KEY = "spark.driver.extraJavaOptions"
KEEP = 6  # archives kept (one per Java and class path: ~150 MB each)
# the JVM reports on its archive on stdout (classes it skips, a mismatch it falls back
# from): a worker's stdout is the protocol, the CLI's the user's
QUIET = "-Xlog:cds=off -Xlog:cds+dynamic=off"
ABANDONED = 3600.0  # seconds after which a partial archive is a killed JVM's: deleted
EXIT_WAIT = 120.0  # seconds the process waits at exit for its JVM to write the archive
# the class path and what else decides which classes the driver loads
KEY_SETTINGS = ("spark.jars", "spark.driver.extraClassPath", OPTIONS_KEY)


def cache_dir() -> Path:
    return Path(os.environ.get("ETLSTAGE_CDS_CACHE") or Path.home() / ".cache" / "etlstage" / "cds")


def enabled(conf: dict[str, str]) -> bool:
    if os.environ.get("ETLSTAGE_SPARK_CDS", "on").lower() in ("off", "0", "false", "no"):
        return False
    theirs = conf.get(OPTIONS_KEY, "")
    return "Xshare" not in theirs and "SharedArchiveFile" not in theirs and "ArchiveClassesAtExit" not in theirs


def archive_key(java: str, conf: dict[str, str]) -> str:
    """One archive per Java (its path and version) and class path (pyspark's jars, the extra jars)."""
    import pyspark

    parts = [java, pyspark.__version__, *(f"{k}={conf.get(k, '')}" for k in KEY_SETTINGS)]
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
    if any(c.isspace() or c in "\"'\\" for c in str(folder)):  # Spark splits the options at spaces
        log.debug("class data sharing off: the cache folder %s holds a space or a quote", folder)
        return ""
    if not private_dir(folder):
        return ""
    _clean_up(folder)
    key = archive_key(java, conf)
    archive = folder / f"{key}.jsa"
    if archive.is_file() and not archive.is_symlink():
        os.utime(archive)  # recently used: kept by the clean-up
        return f"-XX:SharedArchiveFile={archive} -Xshare:auto {QUIET}"
    part = folder / f"{key}.{uuid.uuid4().hex[:12]}.part"
    atexit.register(_take_into_use, part, archive, os.getpid())
    return f"-XX:ArchiveClassesAtExit={part} {QUIET}"


def with_options(conf: dict[str, str], options: str) -> dict[str, str]:
    if not options:
        return conf
    theirs = conf.get(OPTIONS_KEY, "")
    return {**conf, OPTIONS_KEY: f"{theirs} {options}".strip()}


def _take_into_use(part: Path, archive: Path, pid: int) -> None:
    """At exit: stop the JVM, wait until it has written ``part``, then make it the archive.
    A JVM that did not exit cleanly leaves no archive (what it wrote is deleted)."""
    from pyspark import SparkContext

    if os.getpid() != pid:  # a forked child exiting: the JVM is its parent's
        return
    gateway = SparkContext._gateway
    proc = getattr(gateway, "proc", None)
    if proc is None:
        return
    try:
        if proc.stdin is not None:
            proc.stdin.close()  # pyspark's JVM exits at end of input: System.exit(0), then the dump
        code = proc.wait(timeout=EXIT_WAIT)
    except Exception as exc:  # a JVM still writing at the deadline: its file is not trusted
        log.debug("class data sharing: the JVM did not exit in time (%s)", exc)
        code = None
    try:
        if code == 0 and part.is_file() and part.stat().st_size > 0:
            os.replace(part, archive)
            _clean_up(archive.parent)
        else:
            part.unlink(missing_ok=True)
    except OSError as exc:
        log.debug("class data sharing: %s: %s", part, exc)


def _clean_up(folder: Path) -> None:
    """The :data:`KEEP` most recently used archives stay; partial ones a killed JVM left go."""
    import time

    try:
        archives = sorted(folder.glob("*.jsa"), key=lambda p: p.stat().st_mtime, reverse=True)
        for old in archives[KEEP:]:
            old.unlink(missing_ok=True)
        for part in folder.glob("*.part"):
            if time.time() - part.stat().st_mtime > ABANDONED:
                part.unlink(missing_ok=True)
    except OSError as exc:  # another run cleaning up at the same moment
        log.debug("class data sharing: clean-up of %s: %s", folder, exc)


__all__ = ["archive_key", "cache_dir", "enabled", "java_options", "private_dir", "with_options"]
