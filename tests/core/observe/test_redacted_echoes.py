"""A secret in a stage's command is never echoed: not in the log, an error, ``run_ends``
in state.db, ``etlstage status`` (text and JSON), ``/api/status`` or the status page.
Each place shows the key with ``***`` (etlstage/redact.py, the one rule)."""

from __future__ import annotations

import json
import sqlite3
import sys
from pathlib import Path

import pytest

from etlstage.errors import WorkerError
from etlstage.kit.transport import start_error
from etlstage.spark.tasks.process import WorkerProcess
from tests.conftest import PY
from tests.support.live_run import LiveRun
from tests.support.paths import FIXTURES
from tests.support.waiting import wait_for

SECRETS = ("kafkaPW777", "urlPW888", "tokPW999")
# the arguments a worker is given after its program: a librdkafka password, a URL with
# user information, a secret option's value
SECRET_ARGS = '--config, "sasl.password=kafkaPW777", --url, "http://bob:urlPW888@h/x", --token, tokPW999'


def assert_hidden(text: str, where: str) -> None:
    leaked = [s for s in SECRETS if s in text]
    assert not leaked, f"{where} shows {leaked}: {text[-3000:]}"


def run_ends(folder: Path) -> str:
    (db,) = folder.rglob("state.db")
    with sqlite3.connect(db) as con:
        return "\n".join(str(row) for row in con.execute("SELECT * FROM run_ends"))


def status_everywhere(pdir) -> tuple[str, str]:
    text, as_json = pdir.etlstage("status"), pdir.etlstage("status", "--json")
    assert text.code == 0 and as_json.code == 0, (text, as_json)
    return text.stdout, as_json.stdout


def test_a_failed_workers_command_is_shown_without_its_secrets(pdir):
    pdir.write(
        f"""\
        stages:
          - {{name: src, type: E, command: ["{{PY}}", "{{TW}}", count, "3"]}}
          - name: sink
            type: L
            restart: {{max_restarts: 0}}
            command: ["{{PY}}", "-c", "import sys; sys.exit(3)", {SECRET_ARGS}]
        """
    )
    r = pdir.run(timeout=60)
    assert r.code == 1, r.stderr
    assert "'sasl.password=***'" in r.stderr and "'http://***@h/x'" in r.stderr, r.stderr  # shown, hidden
    assert_hidden(r.stderr, "the log")
    assert "sasl.password=***" in run_ends(pdir.path)
    assert_hidden(run_ends(pdir.path), "run_ends")
    text, as_json = status_everywhere(pdir)
    assert "sasl.password=***" in text and "sasl.password=***" in json.loads(as_json)["last_run"]["error"]
    assert_hidden(text + as_json, "etlstage status")


@pytest.mark.slow
@pytest.mark.parametrize("engine", ["supervisor", "spark"])
def test_both_engines_hide_a_failed_services_secrets(pdir, engine: str):
    # a service that fails ends the run before any JVM starts: cheap on the Spark engine too
    pdir.write(
        f"""\
        services:
          - {{name: prepare, ready: exit, command: [sh, -c, "exit 4", sh, {SECRET_ARGS}]}}
        stages:
          - {{name: src, type: E, command: ["{{PY}}", "{{TW}}", count, "3"]}}
          - {{name: sink, type: L, command: ["{{PY}}", "{{TW}}", append, out.txt]}}
        engine: {{kind: {engine}, master: 'local[1]'}}
        """
    )
    r = pdir.run(timeout=120)
    assert r.code == 1 and "service 'prepare' exited with status 4" in r.stderr, r.stderr
    assert "'--token', '***'" in r.stderr, r.stderr
    assert_hidden(r.stderr, "the log")
    assert_hidden(run_ends(pdir.path), "run_ends")
    assert_hidden("".join(status_everywhere(pdir)), "etlstage status")


def test_validate_and_run_name_a_missing_program_without_its_secrets(pdir):
    pdir.write(
        f"""\
        stages:
          - {{name: src, type: E, command: ["{{PY}}", "{{TW}}", count, "3"]}}
          - {{name: sink, type: L, command: [no-such-program-here, {SECRET_ARGS}]}}
        """
    )
    for r, code in ((pdir.etlstage("validate", "stages.yaml"), 2), (pdir.run(timeout=60), 1)):
        assert r.code == code and "no-such-program-here" in r.stderr and "sasl.password=***" in r.stderr, r
        assert_hidden(r.stderr, "the error")


def test_a_start_error_names_the_command_without_its_secrets():
    argv = ["/no/such/worker", "--config", "sasl.password=kafkaPW777", "--token", "tokPW999"]
    for exc in (FileNotFoundError(2, "gone"), PermissionError(13, "no"), OSError(7, "odd")):
        err = start_error(exc, argv, None, "stage sink")
        assert isinstance(err, WorkerError) and "sasl.password=***" in str(err), err
        assert_hidden(str(err), "a start error")
    err = start_error(OSError(2, "gone"), argv, "/no/such/folder", "stage sink")
    assert "sasl.password=***" in str(err)
    assert_hidden(str(err), "a start error")


def test_the_spark_engines_worker_report_names_the_command_without_its_secrets():
    argv = [
        sys.executable,
        "-c",
        "import sys; sys.exit(3)",
        "--config",
        "sasl.password=kafkaPW777",
        "--token",
        "tokPW999",
    ]
    worker = WorkerProcess(argv, {"PATH": "/usr/bin:/bin"}, None, "sink")
    wait_for(lambda: worker.proc.poll() is not None, 20, "the worker's exit")
    report = "\n".join(worker.context())
    assert "'sasl.password=***'" in report and "'--token', '***'" in report, report
    assert_hidden(report, "the Spark engine's worker report")


# a T that crashes once (its 3rd answer), started through sh with secret arguments it
# drops; a restart is reported in one line, and no page, document or log line of the
# live run may grow to show the command with them
LIVE = f"""
name: demo
stages:
  - {{name: src, type: E, mode: cyclic, poll_interval: 0.2, command: ["{PY}", "{{TW}}", count, "100000000", "200"]}}
  - {{name: flaky, type: T, mode: batch, batch_size: 50, restart: {{backoff: 0.1}},
     command: [sh, -c, 'shift 6; exec "$0" "$@"', "{PY}", {SECRET_ARGS}, "{FIXTURES / "misbehave.py"}", flags, crash@3]}}
  - {{name: sink, type: L, mode: batch, batch_size: 100, command: ["{PY}", "{{TW}}", append, out.txt]}}
"""


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_live_runs_status_page_api_and_status_show_a_crash_without_its_secrets(pdir):
    (pdir.path / "flags").mkdir()
    pdir.write(LIVE)
    with LiveRun(pdir.path) as run:
        api = wait_for(lambda: _with_error(run.get("/api/status")[2]), 30, "the crash in /api/status")
        page = run.get("/")[2]
        text, as_json = status_everywhere(pdir)
        assert run.stop() == 0, run.stderr
    for body, where in ((api, "/api/status"), (page, "the page"), (text + as_json, "status"), (run.stderr, "log")):
        assert_hidden(body, where)


def _with_error(body: str) -> str | None:
    return body if json.loads(body)["running"][0]["progress"]["stages"]["flaky"]["last_errors"] else None


def test_a_command_that_cannot_be_split_is_named_without_its_secrets(pdir):
    pdir.write(
        """\
        stages:
          - {name: src, type: E, command: ["{PY}", "{TW}", count, "3"]}
          - {name: sink, type: L, command: "worker --config sasl.password=kafkaPW777 'unclosed"}
        """
    )
    r = pdir.etlstage("validate", "stages.yaml")
    assert r.code == 2 and "cannot be split into arguments" in r.stderr and "sasl.password=***" in r.stderr, r
    assert_hidden(r.stderr, "the error")
