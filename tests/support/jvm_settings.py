"""How the suite runs the JVMs it starts (tests/conftest.py sets these; the warm-up in
tests/support/cds_warmup.py records its class data archives with the same).

Every JVM the tests start lives for seconds to minutes: C1 alone and one GC thread take
about 40 % off the CPU of a loader's start-up and first Spark job, and mapping the
driver's classes from an archive some 35–40 % of what is left (docs/testing.md, "The
JVMs the suite starts"). The bytecode under test is the same; only the JIT's effort and where the
classes are read from differ.
"""

from __future__ import annotations

import os
from pathlib import Path

JAVA_TOOL_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
# map-only: an archive recorded before the tests start is used; no test records one, so
# no test's timing or exit depends on whether it was the first of its class path
CDS_SETTING = "map"


def cds_cache() -> Path:
    """The suite's own archives, apart from a user's (~/.cache/etlstage/cds)."""
    return Path(os.environ.get("ETLSTAGE_SUITE_CDS_CACHE") or Path.home() / ".cache" / "etlstage" / "cds-tests")


def apply() -> None:
    """Set the suite's JVM settings in this process's environment (values already set stay)."""
    os.environ.setdefault("JAVA_TOOL_OPTIONS", JAVA_TOOL_OPTIONS)
    os.environ.setdefault("ETLSTAGE_SPARK_CDS", CDS_SETTING)
    os.environ.setdefault("ETLSTAGE_CDS_CACHE", str(cds_cache()))
