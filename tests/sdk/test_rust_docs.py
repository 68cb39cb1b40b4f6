"""docs/sdk/rust.md runs as written: its transformer and unit test pass `cargo test` in a
new crate that depends on the SDK the way the page says, and the worker passes
`etlstage check-worker` in every T mode."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.sdk.test_sdk_docs import blocks, check_worker

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow


def test_rust_page(tmp_path: Path) -> None:
    (dependency,) = blocks("rust.md", "toml")
    worker, unit = blocks("rust.md", "rust")
    crate = tmp_path / "shout"
    (crate / "src").mkdir(parents=True)
    manifest = '[package]\nname = "shout"\nversion = "0.1.0"\nedition = "2021"\n\n'
    (crate / "Cargo.toml").write_text(manifest + dependency.replace("/path/to/etlstage", str(ROOT)))
    (crate / "src" / "main.rs").write_text(worker + "\n" + unit)

    def cargo(*args: str) -> None:
        r = subprocess.run(["cargo", *args], cwd=crate, capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, r.stdout + r.stderr

    cargo("test", "--quiet")
    cargo("build", "--release", "--quiet")
    check_worker(tmp_path, str(crate / "target" / "release" / "shout"))
