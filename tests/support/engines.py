"""One pipeline on either engine, for tests that hold both to the same outcome.

``Engine.run`` runs a stages.yaml in the test's folder: the supervisor as the CLI a
user runs, the Spark engine in the test run's local session (the ``spark`` fixture of
tests/conftest.py).  It returns the exit code and what the
run wrote to its log and summary.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from tests.support.paths import FIXTURES
from tests.support.run_cli import PY, etlstage

TW = str(FIXTURES / "tw.py")
MISBEHAVE = str(FIXTURES / "misbehave.py")
ENGINES = ["supervisor", pytest.param("spark", marks=pytest.mark.slow)]


class Engine:
    """Runs a stages.yaml in ``tmp`` on one engine; (exit code, what it logged).

    In the text: ``{PY}``, ``{TW}``, ``{MISBEHAVE}``, and ``{FLAGS}`` (a folder for the
    misbehaving workers' flags)."""

    def __init__(self, name: str, request: pytest.FixtureRequest, tmp: Path) -> None:
        self.name = name
        self.request = request
        self.tmp = tmp
        (tmp / "flags").mkdir(exist_ok=True)

    def run(self, stages: str, *args: str) -> tuple[int, str]:
        text = stages.replace("{PY}", PY).replace("{TW}", TW).replace("{MISBEHAVE}", MISBEHAVE)
        text = text.replace("{FLAGS}", str(self.tmp / "flags"))
        (self.tmp / "stages.yaml").write_text(text)
        if self.name == "supervisor":
            r = etlstage(self.tmp, "run", "stages.yaml", "--once", "--no-progress", *args, timeout=200)
            return r.code, r.stderr
        from etlstage.config.loader import parse_config
        from etlstage.spark.driver.config import apply_flags
        from etlstage.spark.driver.run import run_in
        from etlstage.spark.tasks.plan import Plan

        spark = self.request.getfixturevalue("spark")
        caplog: pytest.LogCaptureFixture = self.request.getfixturevalue("caplog")
        capfd: pytest.CaptureFixture[str] = self.request.getfixturevalue("capfd")  # the summary
        caplog.clear()
        capfd.readouterr()
        with caplog.at_level(logging.INFO, logger="etlstage"):
            config = apply_flags(
                parse_config(text, str(self.tmp / "stages.yaml"), base_dir=str(self.tmp)), "spark", None
            )
            code = run_in(spark, Plan(config, once=True), progress=False)
        return code, caplog.text + capfd.readouterr().err

    def cli(self, *args: str) -> tuple[int, str]:
        """Another etlstage command in the test's folder (the same on both engines)."""
        r = etlstage(self.tmp, *args, timeout=60)
        return r.code, r.stdout + r.stderr

    def lines(self, name: str) -> list[str]:
        p = self.tmp / name
        return p.read_text().splitlines() if p.exists() else []

    def batch_lines(self, folder: str) -> list[str]:
        """The lines of every batch file an idempotent loader's FileSink wrote in ``folder``
        (one file a batch id), in no particular order."""
        return [line for batch in (self.tmp / folder).glob("batch-*.txt") for line in batch.read_text().splitlines()]
