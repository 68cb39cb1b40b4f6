"""The Spark engine and other users of the host: secrets never on a command line, the
checkpoint owner-only; a damaged checkpoint named with what to do (exit 2)."""

from __future__ import annotations

import os
import shutil
import signal
import stat
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from tests.conftest import PY, TW
from tests.support.run_cli import ETLSTAGE

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

as_root = pytest.mark.skipif(os.geteuid() != 0, reason="reads ps as user nobody: needs root")


def _ps_as_nobody() -> str:
    done = subprocess.run(
        ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", "ps", "-ww", "-eo", "args"],
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout


def _owner_only(root: Path) -> list[str]:
    """Entries under ``root`` (itself included) that another user could read or enter, or not ours."""
    loose = []
    for path in [root, *root.rglob("*")]:
        st = path.lstat()
        if st.st_uid != os.geteuid() or stat.S_IMODE(st.st_mode) & 0o077:
            loose.append(f"{path.relative_to(root)} {stat.S_IMODE(st.st_mode):o} uid {st.st_uid}")
    return loose


@as_root
def test_exports_reach_the_workers_but_no_command_line_and_the_checkpoint_is_owner_only(tmp_path: Path) -> None:
    secret, name = f"s3cr3t-{uuid.uuid4().hex}", f"sec-{uuid.uuid4().hex[:8]}"
    key = f"s3key-{uuid.uuid4().hex}"  # a secret in engine.conf: set over the gateway, not on spark-submit's
    seen = tmp_path / "seen.txt"
    (tmp_path / "stages.yaml").write_text(
        f"""
name: {name}
services:
  - {{name: db, command: [sh, -c, "echo DB_PASSWORD={secret}; echo READY; exec sleep 600"]}}
stages:
  - {{name: ext, type: E, mode: cyclic, poll_interval: 0.2, command: [{PY}, {TW}, count, "100000000", "5"]}}
  - {{name: t, type: T, command: [sh, -c, 'printf %s "$DB_PASSWORD" > seen.txt; exec "$0" "$@"', {PY}, {TW}, pass]}}
  - {{name: load, type: L, command: [{PY}, {TW}, append, out.txt]}}
engine: {{kind: spark, master: "local[2]", checkpoint: {tmp_path / "elsewhere" / "checkpoint"},
          conf: {{spark.hadoop.fs.s3a.secret.key: {key}}}}}
"""
    )
    proc = subprocess.Popen(
        [*ETLSTAGE, "run", "--no-progress"], cwd=tmp_path, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True
    )
    try:
        out = tmp_path / "out.txt"
        deadline = time.monotonic() + 200
        while not (out.exists() and out.stat().st_size > 0 and seen.exists()):
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()[1][-3000:]
            time.sleep(0.5)
        listing = _ps_as_nobody()  # while the JVM, its Python processes and the workers run
        assert f"spark.app.name=etlstage {name}" in listing, listing[-3000:]  # this run's JVM is listed
        assert secret not in listing, [line for line in listing.splitlines() if secret in line]
        assert key not in listing, [line for line in listing.splitlines() if key in line]
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert seen.read_text() == secret  # the export reached the stage's worker on the executor
    assert secret not in err
    assert _owner_only(tmp_path / "elsewhere" / "checkpoint") == []


# --- a damaged checkpoint ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def done_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A pipeline folder after a successful run of two micro-batches: a checkpoint to damage."""
    from tests.support.run_cli import etlstage

    folder = tmp_path_factory.mktemp("done")
    (folder / "stages.yaml").write_text(
        f"""
stages:
  - {{name: ext, type: E, mode: cyclic, command: [{PY}, {TW}, count, "20", "10"]}}
  - {{name: load, type: L, command: [{PY}, {TW}, append, out.txt]}}
engine: {{kind: spark, master: "local[1]"}}
"""
    )
    r = etlstage(folder, "run", "--once", "--no-progress", timeout=240)
    assert r.code == 0, r.stderr[-3000:]
    return folder


def _damaged(done: Path, tmp_path: Path, damage) -> tuple[Path, Path]:
    folder = tmp_path / "p"
    shutil.copytree(done, folder, symlinks=True)
    checkpoint = folder / ".etlstage" / "stages" / "spark-checkpoint"  # the pipeline's folder, named after the file
    return folder, damage(checkpoint)


def _truncate_last_offsets(checkpoint: Path) -> Path:
    """The batch in flight when the machine lost power: its plan cut short, no commit."""
    last = max((p for p in (checkpoint / "offsets").iterdir() if p.name.isdigit()), key=lambda p: int(p.name))
    last.write_bytes(last.read_bytes()[:5])
    for name in (last.name, f".{last.name}.crc"):
        (checkpoint / "commits" / name).unlink()
    return last


def _garbage_commit(checkpoint: Path) -> Path:
    first = checkpoint / "commits" / "0"
    first.write_bytes(b"\x00\xffgarbage")
    return first


def _delete_metadata(checkpoint: Path) -> Path:
    (checkpoint / "metadata").unlink()
    return checkpoint / "metadata"


@pytest.mark.parametrize(
    "damage, says",
    [
        (_truncate_last_offsets, "remove it"),
        (_garbage_commit, "mv "),
        (_delete_metadata, "mv "),
    ],
)
def test_a_damaged_checkpoint_is_named_with_what_to_do(done_checkpoint: Path, tmp_path: Path, damage, says) -> None:
    from tests.support.run_cli import etlstage

    folder, file = _damaged(done_checkpoint, tmp_path, damage)
    r = etlstage(folder, "run", "--once", "--no-progress", timeout=240)
    assert r.code == 2, r.stderr[-3000:]
    assert str(file) in r.stderr and "damaged" in r.stderr and says in r.stderr, r.stderr[-3000:]
    assert "Traceback" not in r.stderr and "org.apache" not in r.stderr, r.stderr[-3000:]
    status = etlstage(folder, "status")
    assert status.code == 2 and str(file) in status.stderr and says in status.stderr, status.stderr
