"""Odd input from workers and files: a clear message (exit 2 where it stops the run), never a traceback."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import time

import pytest

from tests.support.live_run import LiveRun
from tests.support.run_cli import ETLSTAGE

# Each T-stage's worker writes a report file of the wrong shape, then passes messages on.
ODD_REPORTS = {
    "t_list": "[1,2]",
    "t_deep": '{"n": 2, "a": {"b": {"c": 1}}, "mixed": {"x": 1, "y": "two"}}',
    "t_text": '{"ok": 3, "s": "x", "flag": true, "none": null}',
}


def _odd_stages() -> str:
    stages = [
        '  - {name: src, type: E, mode: cyclic, poll_interval: 0.2, command: ["{PY}", "{TW}", count, "1000000", "50"]}'
    ]
    for name, body in ODD_REPORTS.items():
        script = f'printf \'%s\' \'{body}\' > "$ETLSTAGE_STATE_DIR/report-$ETLSTAGE_INSTANCE-$$.json"; exec "$0" "$@"'
        stages.append(
            f"  - {{name: {name}, type: T, mode: batch, command: [sh, -c, {json.dumps(script)}, '{{PY}}', '{{TW}}', pass]}}"
        )
    stages.append('  - {name: sink, type: L, mode: batch, command: ["{PY}", "{TW}", append, out.txt]}')
    return "name: odd\nstages:\n" + "\n".join(stages) + "\n"


@pytest.mark.slow
def test_report_files_that_are_not_numbers_are_ignored_with_one_warning(pdir):
    pdir.write(_odd_stages())
    with LiveRun(pdir.path) as run:
        deadline = time.monotonic() + 30
        while "t_text" not in run.get("/api/status")[2] or '"ok":3' not in run.get("/api/status")[2]:
            assert time.monotonic() < deadline, run.stderr
            time.sleep(0.2)
        for path in ("/", "/api/status", "/metrics"):
            status, _, body = run.get(path)
            assert status == 200, (path, body[-2000:])
        assert run.get("/api/status")[0] == 200  # asked again: still answered, still one warning each
        code = run.stop()
    assert code == 0, run.stderr
    assert "Traceback" not in run.stderr
    for name in ODD_REPORTS:
        warned = [line for line in run.lines if f"stage {name}:" in line and "report-0-" in line]
        assert len(warned) == 1, (name, run.stderr[-3000:])
    assert "t_text: ok 3" in run.stderr  # the numbers that are there still count
    assert "t_deep: n 2, mixed (x 1)" in run.stderr


CYCLIC = """
    stages:
      - {name: src, type: E, mode: cyclic, poll_interval: 0.1, command: ["{PY}", "{TW}", count, "100000000", "20"]}
      - {name: sink, type: L, mode: batch, command: ["{PY}", "{TW}", append, out.txt]}
"""


def test_a_sqlite_file_that_is_not_etlstages_is_refused_by_status_and_run(pdir):
    pdir.write(CYCLIC)
    (pdir.path / ".etlstage").mkdir(mode=0o700)
    db = sqlite3.connect(pdir.path / ".etlstage" / "state.db")
    db.execute("CREATE TABLE checkpoints (name TEXT, value BLOB)")
    db.commit()
    db.close()
    for args in (("status", "stages.yaml"), ("run", "stages.yaml", "--once", "--no-progress")):
        r = pdir.etlstage(*args)
        assert r.code == 2, r.stderr
        assert "damaged or is not etlstage's" in r.stderr and "checkpoints" in r.stderr, r.stderr
        assert "Traceback" not in r.stderr


def _live(pdir) -> subprocess.Popen[str]:
    pdir.write(CYCLIC)
    proc = subprocess.Popen(
        [*ETLSTAGE, "run", "stages.yaml", "--no-progress"], cwd=pdir.path, stderr=subprocess.PIPE, text=True
    )
    out = pdir.path / "out.txt"
    deadline = time.monotonic() + 30
    while not (out.exists() and len(out.read_text().splitlines()) >= 40):  # windows are committed
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()[1]
        time.sleep(0.1)
    return proc


@pytest.mark.slow
def test_a_table_dropped_during_a_run_ends_it_with_exit_2(pdir):
    proc = _live(pdir)
    db = sqlite3.connect(pdir.path / ".etlstage" / "state.db", timeout=30)
    db.execute("DROP TABLE checkpoints")
    db.close()
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 2, err
    assert "damaged or is not etlstage's" in err and "checkpoints" in err, err
    assert "Traceback" not in err
    r = pdir.etlstage("status", "stages.yaml")
    assert r.code == 2 and "damaged" in r.stderr and "Traceback" not in r.stderr, r.stderr


@pytest.mark.slow
def test_state_db_truncated_during_a_run_is_noticed(pdir):
    proc = _live(pdir)
    db = sqlite3.connect(pdir.path / ".etlstage" / "state.db", timeout=30)
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # all of it in state.db, none left in the WAL alone
    db.close()
    os.truncate(pdir.path / ".etlstage" / "state.db", 0)
    try:
        _, err = proc.communicate(timeout=60)  # the next heartbeat (2 s) finds it and stops the run
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 2, err
    assert "was truncated or overwritten during the run" in err, err
