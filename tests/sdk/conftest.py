"""Fixtures for the SDK tests: the Go example workers built once per session."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

SDK = Path(__file__).resolve().parents[2] / "sdk"
GO_BIN = SDK / "go" / "bin"


def build_go_examples() -> Path:
    """``sdk/go/bin/{upper,count,sink}`` (what sdk/examples/stages.yaml runs)."""
    subprocess.run(
        ["go", "build", "-o", str(GO_BIN) + "/", "./examples/..."],
        cwd=SDK / "go",
        check=True,
        capture_output=True,
        timeout=600,
    )
    return GO_BIN


@pytest.fixture(scope="session")
def go_examples() -> Path:
    if shutil.which("go") is None:
        pytest.skip("go is not installed")
    return build_go_examples()
