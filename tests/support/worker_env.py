"""The environment a test gives a worker it starts without a supervisor."""

from __future__ import annotations

import os

# the suite's own settings (tests/conftest.py), not a supervisor's: a worker keeps them
SUITE_SETTINGS = ("ETLSTAGE_SPARK_CDS", "ETLSTAGE_CDS_CACHE")


def without_supervisor_vars() -> dict[str, str]:
    """``os.environ`` without the ``ETLSTAGE_`` variables a supervisor would set, so that a
    test sets its own; the suite's settings stay (a loader started this way would otherwise
    record class data archives into the user's ``~/.cache``)."""
    return {k: v for k, v in os.environ.items() if not k.startswith("ETLSTAGE_") or k in SUITE_SETTINGS}
