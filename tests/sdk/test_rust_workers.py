"""The Rust SDK's example workers pass `etlstage check-worker` in every mode they declare."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.support.run_cli import etlstage

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow


@pytest.mark.parametrize(
    "kind, example, checks",
    [("T", "upper", 8), ("E", "counter", 3)],
)
def test_example_passes_check_worker_in_every_mode(rust_examples: Path, kind: str, example: str, checks: int) -> None:
    r = etlstage(ROOT, "check-worker", "--type", kind, "--", str(rust_examples / example), timeout=300)
    assert r.code == 0, r.stdout + r.stderr
    assert f"{checks} passed, 0 failed" in r.stdout


def test_example_loader_loads_a_batch_sent_again_once(rust_examples: Path, tmp_path: Path) -> None:
    """examples/sink.rs commits each batch by its id (FileSink) and reports its folder: a
    batch sent again after a crash is checked to change nothing there (an id ignored fails)."""
    out = tmp_path / "out"
    r = etlstage(
        tmp_path, "check-worker", "--type", "L", "--batch-id", "--", str(rust_examples / "sink"), str(out), timeout=300
    )
    assert r.code == 0, r.stdout + r.stderr
    assert "7 passed, 0 failed" in r.stdout
    assert "PASS  batch ids: a batch sent again" in r.stdout and "partly" not in r.stdout
    assert any(out.iterdir())  # it loaded what it acknowledged


def test_stray_stdout_writes_go_to_stderr(rust_examples: Path, tmp_path: Path) -> None:
    """A worker's own println! cannot break the stream: fd 1 is stderr once the SDK runs."""
    proc = subprocess.run(
        [str(rust_examples / "noisy")],
        input=b"a\nb\n",
        capture_output=True,
        env={"ETLSTAGE_TYPE": "T", "ETLSTAGE_MODE": "single", "ETLSTAGE_STATE_DIR": str(tmp_path)},
        timeout=30,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == b"a\n\x00b\n\x00"
    assert proc.stderr.count(b"processing a batch of 1") == 2


def test_a_bad_environment_exits_2_naming_the_variable(rust_examples: Path) -> None:
    proc = subprocess.run(
        [str(rust_examples / "upper")],
        input=b"a\n",
        capture_output=True,
        env={"ETLSTAGE_TYPE": "T", "ETLSTAGE_BATCH_SIZE": "zero"},
        timeout=30,
    )
    assert proc.returncode == 2
    assert proc.stdout == b""
    assert b'ETLSTAGE_BATCH_SIZE="zero"' in proc.stderr and b"panicked" not in proc.stderr


def test_the_extractor_serves_supervisor_managed_windows(rust_examples: Path) -> None:
    proc = subprocess.run(
        [str(rust_examples / "counter"), "3", "7"],
        input=b'{"start": 5, "end": 9}\n{"start": 9, "end": 12}\n',
        capture_output=True,
        env={"ETLSTAGE_TYPE": "E", "ETLSTAGE_MODE": "cyclic", "ETLSTAGE_OFFSETS": "supervisor"},
        timeout=30,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == b"record 5\nrecord 6\n\x00\x00"  # capped at TOTAL 7
