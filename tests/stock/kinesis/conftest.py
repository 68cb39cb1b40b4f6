"""The Kinesis tests' servers and helpers (tests/kinesis/conftest.py), for the tests in this folder."""

from __future__ import annotations

import importlib.util
from pathlib import Path

_spec = importlib.util.spec_from_file_location(
    "kinesis_fixtures", Path(__file__).resolve().parents[2] / "kinesis" / "conftest.py"
)
assert _spec is not None and _spec.loader is not None
_fixtures = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_fixtures)

emulator = _fixtures.emulator
stream = _fixtures.stream
proxy = _fixtures.proxy
spawn = _fixtures.spawn
put_records = _fixtures.put_records
