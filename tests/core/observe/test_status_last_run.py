"""After a run, ``etlstage status`` says how it ended: end time, exit status, error."""

from __future__ import annotations

import json
import sqlite3

import pytest

from etlstage.state.lastrun import last_run
from etlstage.state.store import StateStore

FAILING = """\
stages:
  - {name: src, type: E, command: ["{PY}", "{TW}", count, "3"]}
  - name: sink
    type: L
    restart: {max_restarts: 0}
    command: ["{PY}", "-c", "import sys; sys.stderr.write('disk quota exceeded' + chr(10)); sys.exit(3)"]
"""
GOOD = """\
stages:
  - {name: src, type: E, command: ["{PY}", "{TW}", count, "3"]}
  - {name: sink, type: L, command: ["{PY}", "{TW}", append, out.txt]}
"""


def test_status_after_a_failed_run_shows_its_end_exit_status_and_error(pdir):
    pdir.write(FAILING)
    r = pdir.run(timeout=60)
    assert r.code == 1, r.stderr
    s = pdir.etlstage("status")
    assert s.code == 0, s
    assert "running: no" in s.stdout
    assert "last run: failed, exit status 1, ended " in s.stdout, s.stdout
    error = s.stdout[s.stdout.index("  error: ") :]
    assert "sink" in error and "disk quota exceeded" in error, s.stdout
    doc = json.loads(pdir.etlstage("status", "--json").stdout)["last_run"]
    assert (doc["exit_status"], doc["outcome"], doc["engine"]) == (1, "failed", "supervisor")
    assert doc["ended_at"] >= doc["started_at"] and "disk quota exceeded" in doc["error"]


def test_status_after_a_good_run_shows_the_newest_end(pdir):
    pdir.write(FAILING)
    assert pdir.run(timeout=60).code == 1
    pdir.write(GOOD)
    assert pdir.run(timeout=60).code == 0
    s = pdir.etlstage("status")
    assert "last run: done, exit status 0, ended " in s.stdout, s.stdout
    assert "error:" not in s.stdout
    assert json.loads(pdir.etlstage("status", "--json").stdout)["last_run"]["error"] is None


SERVICE_FAILS = """\
services:
  - {name: prepare, ready: exit, command: [sh, -c, "echo no data here >&2; exit 4"]}
stages:
  - {name: src, type: E, command: ["{PY}", "{TW}", count, "3"]}
  - {name: sink, type: L, command: ["{PY}", "{TW}", append, out.txt]}
"""


def test_both_engines_record_how_a_run_ended(pdir):
    # a service that fails ends the run before any JVM starts: cheap on the Spark engine too
    for engine in ("supervisor", "spark"):
        pdir.write(SERVICE_FAILS + f"engine: {{kind: {engine}, master: 'local[1]'}}\n")
        r = pdir.run(timeout=120)
        assert r.code == 1, r.stderr
        s = pdir.etlstage("status")
        assert s.code == 0, s
        assert "last run: failed, exit status 1, ended " in s.stdout and f"{engine} engine)" in s.stdout, s.stdout
        error = s.stdout[s.stdout.index("  error: ") :]
        assert "service 'prepare' exited with status 4" in error.splitlines()[0] and "no data here" in error
        doc = json.loads(pdir.etlstage("status", "--json").stdout)
        assert doc["last_run"]["engine"] == engine and doc["last_run"]["exit_status"] == 1


def test_a_run_ends_table_that_cannot_be_read_is_an_error_not_no_run(tmp_path):
    """Only a missing table means "no run has ended yet"; any other failure to read it
    (a table of another shape) is raised, not taken for an empty history."""
    store = StateStore(str(tmp_path))
    store.db.execute("DROP TABLE IF EXISTS run_ends")
    store.db.execute("CREATE TABLE run_ends (pid INTEGER)")
    with pytest.raises(sqlite3.OperationalError, match="no such column"):
        last_run(store)
