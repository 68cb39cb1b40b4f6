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
        # the shell's $$ (its pid) is written $$$$: stages.yaml reads $$ as one $
        script = f'printf \'%s\' \'{body}\' > "$ETLSTAGE_STATE_DIR/report-$ETLSTAGE_INSTANCE-$$$$.json"; exec "$0" "$@"'
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
    (pdir.path / ".etlstage" / "stages").mkdir(mode=0o700)  # the pipeline's folder (named after the file)
    db = sqlite3.connect(pdir.path / ".etlstage" / "stages" / "state.db")
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
    db = sqlite3.connect(pdir.path / ".etlstage" / "stages" / "state.db", timeout=30)
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
    db = sqlite3.connect(pdir.path / ".etlstage" / "stages" / "state.db", timeout=30)
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # all of it in state.db, none left in the WAL alone
    db.close()
    os.truncate(pdir.path / ".etlstage" / "stages" / "state.db", 0)
    try:
        _, err = proc.communicate(timeout=60)  # the next heartbeat (2 s) finds it and stops the run
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 2, err
    assert "was truncated or overwritten during the run" in err, err


def _time_policy(start: str, step: str = "PT1H", lag: str = "0") -> str:
    return f"""
    stages:
      - name: src
        type: E
        mode: cyclic
        offsets: supervisor
        offset_policy: {{type: time, start: {start}, step: {step}, lag: {lag}}}
        command: ["{{PY}}", "{{TW}}", count, "3"]
      - {{name: sink, type: L, command: ["{{PY}}", "{{TW}}", append, out.txt]}}
    """


@pytest.mark.parametrize(
    "yaml_text, expected",
    [
        (CYCLIC.replace("name: sink", "name: 2026-02-30"), None),  # a name like any other
        (CYCLIC.replace("stages:", "name: 2026-02-30\n    stages:"), None),
        (_time_policy("2026-02-30"), "offset_policy.start: '2026-02-30' is not an ISO-8601 instant"),
        (_time_policy("9999-12-31T23:00:00Z"), "the first window is out of the years 1-9999"),
        (_time_policy("2026-01-01T00:00:00Z", "PT0S"), "offset_policy.step: 'PT0S' is no time"),
        (_time_policy("2026-01-01T00:00:00Z", "0"), "offset_policy.step: 0 is no time"),
        (_time_policy("2026-01-01T00:00:00Z", lag="P999999D"), "the first window is out of the years 1-9999"),
        (CYCLIC.replace("name: sink", "name: !!int abc"), "stages.yaml:4:12: not valid YAML: int 'abc'"),
        (CYCLIC.replace("name: sink", "name: !!bool maybe"), "stages.yaml:4:12: not valid YAML: bool 'maybe'"),
    ],
)
def test_dates_and_time_policies_in_stages_yaml(pdir, yaml_text, expected):
    pdir.write(yaml_text)
    for command in ("validate", "status"):
        r = pdir.etlstage(command, "stages.yaml")
        assert "Traceback" not in r.stderr, r.stderr
        if expected is None:
            assert r.code in (0, 2) and ("no state yet" in r.stderr or r.code == 0), r.stderr
        else:
            assert r.code == 2 and expected in r.stderr, r.stderr


def test_an_unquoted_timestamp_is_a_start_like_a_quoted_one(pdir):
    for start in ("2026-01-01T00:00:00Z", "'2026-01-01T00:00:00Z'", "2026-01-01 00:00:00", "2026-01-01"):
        pdir.write(_time_policy(start))
        r = pdir.etlstage("validate", "stages.yaml")
        assert r.code == 0, (start, r.stderr)
