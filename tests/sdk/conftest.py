"""Fixtures for the SDK tests: the compiled SDKs' example workers, built once per session."""

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


@pytest.fixture(scope="session")
def rust_examples() -> Path:
    """``sdk/rust/target/release/examples/`` (cargo does nothing when they are up to date)."""
    if shutil.which("cargo") is None:
        pytest.skip("cargo is not installed")
    crate = SDK / "rust"
    subprocess.run(
        ["cargo", "build", "--release", "--examples", "--quiet"],
        cwd=crate,
        check=True,
        capture_output=True,
        timeout=900,
    )
    return crate / "target" / "release" / "examples"


@pytest.fixture(scope="session")
def java_classes() -> Path:
    """``sdk/java/target/classes``: the Java SDK and its examples, compiled."""
    if shutil.which("mvn") is None:
        pytest.skip("mvn is not installed")
    project = SDK / "java"
    subprocess.run(["mvn", "-q", "-B", "compile"], cwd=project, check=True, capture_output=True, timeout=900)
    return project / "target" / "classes"
