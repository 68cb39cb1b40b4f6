"""Fixtures for the Spark loader tests: one shared local SparkSession per test session."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def spark():
    from etlstage_workers.spark.session import start_session

    session = start_session("local[2]", "etlstage-spark-tests", {}, connect_timeout=10, log_level="ERROR")
    yield session
    session.stop()
