"""Starting workers and logging what comes from outside: clear spawn errors, the venv found without
activating it, and no forged log line or terminal escape from names or worker stderr."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from tests.support.paths import TESTS
from tests.support.run_cli import ETLSTAGE

HOSTILE = str(TESTS / "fixtures" / "hostile_stderr.py")
FORGED = "2026-01-01 00:00:00,000 ERROR etlstage: forged"


def test_a_missing_working_directory_is_named_as_such(pdir):
    pdir.write("""\
        stages:
          - {name: src, type: E, command: ["{PY}", "{TW}", count, "3"]}
          - {name: sink, type: L, cwd: no-such-dir, restart: {max_restarts: 0}, command: [python3, -V]}
    """)
    r = pdir.run("--once")
    assert r.code == 1, r.stderr
    assert f"cannot start sink: its working directory {pdir.path / 'no-such-dir'} does not exist" in r.stderr
    assert "not found" not in r.stderr and "install it" not in r.stderr, r.stderr


def test_a_missing_or_unexecutable_program_is_named_with_its_fix(pdir):
    """The program's own name (not an argument of it) and what to do, for each way it fails."""
    (pdir.path / "plain.sh").write_text("#!/bin/sh\necho hi\n")  # not executable
    for program, says, fix in (
        ("no-such-worker-program", "program 'no-such-worker-program' not found", "fix: install it"),
        ("./plain.sh", "'./plain.sh' is not executable", "fix: chmod +x it"),
    ):
        pdir.write(f"""\
            stages:
              - {{name: src, type: E, command: ["{{PY}}", "{{TW}}", count, "3"]}}
              - {{name: sink, type: L, restart: {{max_restarts: 0}}, command: [{program}, --its-argument]}}
        """)
        r = pdir.run("--once")
        assert r.code == 1, r.stderr
        assert f"cannot start sink: {says}" in r.stderr, r.stderr
        assert fix in r.stderr, r.stderr


VENV_BIN = Path(sys.executable).parent
NO_VENV_PATH = "/usr/bin:/bin"


def run_without_venv_on_path(pdir) -> subprocess.CompletedProcess[str]:
    """/path/to/venv/bin/etlstage run, as a user who never activated the venv runs it."""
    assert (VENV_BIN / "etlstage").exists()
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    env["PATH"] = NO_VENV_PATH
    return subprocess.run(
        [str(VENV_BIN / "etlstage"), "run", "stages.yaml", "--once", "--no-progress", "--log-level", "DEBUG"],
        cwd=pdir.path,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )


def test_the_kcl_wrapper_is_found_without_the_venv_on_path(pdir):
    assert shutil.which("etlstage-kcl-adapter", path=NO_VENV_PATH) is None
    child = pdir.path / "mld_child.js"
    shutil.copy(TESTS / "fixtures" / "kcl_children" / "mld_child.js", child)
    pdir.write(f"""\
        stages:
          - {{name: src, type: E, command: ["{{PY}}", "{{TW}}", count, "30"]}}
          - {{name: kcl, type: L, mode: batch, batch_size: 10, protocol: kcl-multilang, protocol_version: 1,
              env: {{KCL_TEST_OUT: records.txt}}, command: [node, "{child}", v1]}}
    """)
    proc = run_without_venv_on_path(pdir)
    assert proc.returncode == 0, proc.stderr
    assert len([x for x in pdir.lines("records.txt") if x.startswith("RECORD")]) == 30


def test_a_bare_program_name_beside_the_running_etlstage_is_used(pdir):
    assert shutil.which("etlstage-rdss", path=NO_VENV_PATH) is None and (VENV_BIN / "etlstage-rdss").exists()
    pdir.write("""\
        services:
          - {name: demo, ready: exit, command: [etlstage-rdss, demo-data, --count, "5", --out, data.jsonl,
              --expected, expected.json]}
        stages:
          - {name: src, type: E, command: ["{PY}", "{TW}", count, "3"]}
          - {name: sink, type: L, command: ["{PY}", "{TW}", append, out.txt]}
    """)
    proc = run_without_venv_on_path(pdir)
    assert proc.returncode == 0, proc.stderr
    assert len(pdir.lines("data.jsonl")) == 5
    beside = VENV_BIN / "etlstage-rdss"
    assert f"'etlstage-rdss' is not on PATH; using {beside}, beside the running etlstage" in proc.stderr


def run_raw(pdir, *args: str) -> tuple[int, str]:
    """The CLI's exit status and stderr exactly as written (no newline translation: a \\r stays a \\r)."""
    proc = subprocess.run([*ETLSTAGE, *args], cwd=pdir.path, capture_output=True, timeout=120)
    return proc.returncode, proc.stderr.decode("utf-8", "replace")


def forged(stderr: str) -> list[str]:
    """Lines a terminal or a log reader would take for a record of their own: after \\n, or after \\r."""
    return [line for line in stderr.replace("\r", "\n").split("\n") if line.startswith(FORGED)]


def test_a_newline_in_the_pipeline_file_name_forges_no_log_line(pdir):
    name = f"x\n{FORGED}.yaml"
    pdir.write(
        """\
        stages:
          - {name: src, type: E, command: ["{PY}", "{TW}", count, "3"]}
          - {name: sink, type: L, command: ["{PY}", "{TW}", append, out.txt]}
    """,
        name=name,
    )
    code, stderr = run_raw(pdir, "run", name, "--once", "--no-progress")
    assert code == 0, stderr
    assert not forged(stderr), stderr
    assert f"pipeline x\\n{FORGED}: src → sink" in stderr


def test_worker_stderr_is_logged_with_its_control_characters_escaped(pdir):
    pdir.write(f"""\
        stages:
          - {{name: src, type: E, command: ["{{PY}}", "{{TW}}", count, "3"]}}
          - {{name: sink, type: L, command: ["{{PY}}", "{HOSTILE}"]}}
    """)
    for log_format in ("text", "syslog"):
        code, stderr = run_raw(pdir, "run", "stages.yaml", "--once", "--no-progress", "--log-format", log_format)
        assert code == 0, stderr
        assert "\r" not in stderr and "\x1b" not in stderr and not forged(stderr), repr(stderr)
        assert f"[sink] note\\r{FORGED} \\x1b[31mred\\x1b[0m\ttab" in stderr, stderr
    code, stderr = run_raw(pdir, "run", "stages.yaml", "--once", "--no-progress", "--log-format", "json")
    records = [json.loads(line) for line in stderr.splitlines() if line.startswith("{")]
    assert any(rec["message"] == f"[sink] note\\r{FORGED} \\x1b[31mred\\x1b[0m\ttab" for rec in records), stderr


def test_worker_stderr_in_a_failure_report_is_escaped_too(pdir):
    pdir.write(f"""\
        stages:
          - {{name: src, type: E, command: ["{{PY}}", "{{TW}}", count, "3"]}}
          - {{name: sink, type: L, restart: {{max_restarts: 0}}, command: ["{{PY}}", "{HOSTILE}", fail]}}
    """)
    code, stderr = run_raw(pdir, "run", "stages.yaml", "--once", "--no-progress")
    assert code == 1, stderr
    assert "\r" not in stderr and "\x1b" not in stderr and not forged(stderr), repr(stderr)
    assert f"| note\\r{FORGED} \\x1b[31mred" in stderr, stderr
