"""Where things are, for tests in any folder."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]  # the repository
TESTS = ROOT / "tests"
FIXTURES = TESTS / "fixtures"  # worker programs the tests run
DATA = TESTS / "data"
EXAMPLES = ROOT / "workers" / "examples"
