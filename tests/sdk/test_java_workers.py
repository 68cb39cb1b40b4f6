"""The Java SDK's example workers pass `etlstage check-worker` in every mode they declare."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.support.run_cli import etlstage

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow


@pytest.fixture
def java(java_classes: Path) -> list[str]:
    """The command that runs one of the examples."""
    return ["java", "-cp", str(java_classes)]


@pytest.mark.parametrize(
    "kind, example, checks",
    [("T", "Upper", 8), ("E", "Counter", 3)],
)
def test_example_passes_check_worker_in_every_mode(java: list[str], kind: str, example: str, checks: int) -> None:
    r = etlstage(ROOT, "check-worker", "--type", kind, "--", *java, f"org.etlstage.examples.{example}", timeout=300)
    assert r.code == 0, r.stdout + r.stderr
    assert f"{checks} passed, 0 failed" in r.stdout


def test_example_loader_loads_a_batch_sent_again_once(java: list[str], tmp_path: Path) -> None:
    """org.etlstage.examples.Sink commits each batch by its id (FileSink) and reports its
    folder: a batch sent again after a crash is checked to change nothing there (an id
    ignored fails)."""
    out = tmp_path / "out"
    argv = [*java, "org.etlstage.examples.Sink", str(out)]
    r = etlstage(tmp_path, "check-worker", "--type", "L", "--batch-id", "--", *argv, timeout=300)
    assert r.code == 0, r.stdout + r.stderr
    assert "7 passed, 0 failed" in r.stdout
    assert "PASS  batch ids: a batch sent again" in r.stdout and "partly" not in r.stdout
    assert any(out.iterdir())  # it loaded what it acknowledged


def test_stray_stdout_writes_go_to_stderr(java: list[str], tmp_path: Path) -> None:
    """A worker's own System.out.println cannot break the stream: the SDK sends it to stderr."""
    proc = subprocess.run(
        [*java, "org.etlstage.examples.Noisy"],
        input=b"a\nb\n",
        capture_output=True,
        env={
            "ETLSTAGE_TYPE": "T",
            "ETLSTAGE_MODE": "single",
            "ETLSTAGE_STATE_DIR": str(tmp_path),
            "PATH": "/usr/bin:/bin",
        },
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == b"a\n\x00b\n\x00"
    assert proc.stderr.count(b"processing a batch of 1") == 2


def test_a_bad_environment_exits_2_naming_the_variable(java: list[str]) -> None:
    proc = subprocess.run(
        [*java, "org.etlstage.examples.Upper"],
        input=b"a\n",
        capture_output=True,
        env={"ETLSTAGE_TYPE": "T", "ETLSTAGE_BATCH_SIZE": "zero", "PATH": "/usr/bin:/bin"},
        timeout=60,
    )
    assert proc.returncode == 2
    assert proc.stdout == b""
    assert b'ETLSTAGE_BATCH_SIZE="zero"' in proc.stderr and b"Exception" not in proc.stderr


def test_the_extractor_serves_supervisor_managed_windows(java: list[str]) -> None:
    proc = subprocess.run(
        [*java, "org.etlstage.examples.Counter", "3", "7"],
        input=b'{"start": 5, "end": 9}\n{"start": 9, "end": 12}\n',
        capture_output=True,
        env={
            "ETLSTAGE_TYPE": "E",
            "ETLSTAGE_MODE": "cyclic",
            "ETLSTAGE_OFFSETS": "supervisor",
            "PATH": "/usr/bin:/bin",
        },
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == b"record 5\nrecord 6\n\x00\x00"  # capped at TOTAL 7
