"""Repeated warnings are counted, not all shown; a worker's JSON log line stays an object."""

from __future__ import annotations

import json
import logging
import re
import subprocess
import sys
import textwrap

import pytest

from etlstage.logs import JsonFormatter, RepeatedWarnings, worker_record
from tests.support.worker_env import without_supervisor_vars


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def record(msg: str, *args: object, level: int = logging.WARNING, name: str = "etlstage.rdss") -> logging.LogRecord:
    return logging.LogRecord(name, level, __file__, 1, msg, args, None)


def shown(f: RepeatedWarnings, records: list[logging.LogRecord]) -> list[str]:
    return [r.getMessage() for r in records if f.filter(r)]


def test_the_first_of_a_kind_are_shown_then_one_per_period_with_the_count():
    clock = Clock()
    f = RepeatedWarnings(first=3, every=10.0, clock=clock)
    out = shown(f, [record("Message %s to the %s queue", i, "invalid") for i in range(100)])
    assert out[:2] == ["Message 0 to the invalid queue", "Message 1 to the invalid queue"]
    assert out[2] == "Message 2 to the invalid queue [more like this are counted: one shown every 10s]"
    assert len(out) == 3
    clock.now = 12.0
    assert shown(f, [record("Message %s to the %s queue", 100, "invalid")]) == [
        "Message 100 to the invalid queue [1 of 98 like this in the last 12s]"
    ]
    clock.now = 13.0
    assert shown(f, [record("Message %s to the %s queue", 101, "invalid")]) == []
    assert f.pending() == [
        "1 more warning(s) from etlstage.rdss not shown, the last: 'Message 101 to the invalid queue'"
    ]


def test_kinds_are_apart_and_other_levels_untouched():
    f = RepeatedWarnings(first=1, every=60.0, clock=Clock())
    assert len(shown(f, [record("a %s", i) for i in range(5)])) == 1
    assert len(shown(f, [record("b %s", i) for i in range(5)])) == 1
    assert len(shown(f, [record("a %s", i, name="other") for i in range(5)])) == 1
    assert len(shown(f, [record("a %s", i, level=logging.INFO) for i in range(5)])) == 5
    assert len(shown(f, [record("a %s", i, level=logging.ERROR) for i in range(5)])) == 5


LOGS_MANY = textwrap.dedent("""\
    import logging
    from etlstage.logs import setup_logging
    setup_logging("w")
    log = logging.getLogger("w.rdss")
    for i in range(200):
        log.warning("Message %s to the invalid queue: %s", i, "GENERR010")
    log.warning("another kind")
""")


def run_logger(env: dict[str, str] | None = None) -> list[str]:
    r = subprocess.run(
        [sys.executable, "-c", LOGS_MANY], capture_output=True, text=True, timeout=60, env={**_env(), **(env or {})}
    )
    assert r.returncode == 0, r.stderr
    return r.stderr.splitlines()


def _env() -> dict[str, str]:
    return without_supervisor_vars()


def test_a_process_logs_the_first_few_and_at_exit_how_many_were_held_back():
    lines = run_logger()
    assert len(lines) == 5 + 1 + 1, "\n".join(lines)
    assert "Message 4 to the invalid queue: GENERR010 [more like this are counted" in lines[4]
    assert "another kind" in lines[5]
    assert lines[6].endswith(
        "195 more warning(s) from w.rdss not shown, the last: 'Message 199 to the invalid queue: GENERR010'"
    ), lines[6]
    assert "%s" not in lines[6]  # no template leaks
    assert len(run_logger({"ETLSTAGE_LOG_REPEATS": "0"})) == 201


def relay(text: str) -> dict[str, object]:
    rec = logging.LogRecord("etlstage.worker", logging.INFO, __file__, 1, "[%s] %s", ("rdss#1", text), None)
    rec.__dict__.update(worker_record("rdss#1", text))
    return json.loads(JsonFormatter().format(rec))


def test_a_workers_json_line_is_relayed_as_an_object():
    line = json.dumps({"time": "t", "level": "WARNING", "logger": "etlstage.rdss", "message": "Message é rejected"})
    doc = relay(line)
    assert doc["worker_log"] == json.loads(line)
    assert doc["message"] == "Message é rejected" and doc["source"] == "rdss#1"
    # anything else stays the text it was
    for text in ("plain text", "[1, 2]", "{not json"):
        doc = relay(text)
        assert doc["message"] == f"[rdss#1] {text}" and "worker_log" not in doc


# a JSON log line on stderr, then the test loader
LOGS_THEN_APPENDS = (
    "import json, os, sys; sys.stderr.write(json.dumps({'level': 'INFO', 'message': 'hello'}) + chr(10)); "
    "sys.stderr.flush(); os.execv(sys.argv[1], [sys.argv[1], sys.argv[2], 'append', 'out.txt'])"
)


def test_a_pipeline_run_with_json_logs_relays_worker_json_as_objects(pdir):
    pdir.write(
        """\
        stages:
          - {name: src, type: E, command: ["{PY}", "{TW}", count, "3"]}
          - {name: sink, type: L, command: ["{PY}", "-c", "{LOGS_THEN_APPENDS}", "{PY}", "{TW}"]}
        """.replace("{LOGS_THEN_APPENDS}", LOGS_THEN_APPENDS)
    )
    r = pdir.etlstage("run", "stages.yaml", "--once", "--no-progress", "--log-format", "json", timeout=60)
    assert r.code == 0, r.stderr
    docs = [json.loads(line) for line in r.stderr.splitlines() if line.startswith("{")]
    relayed = [d for d in docs if "worker_log" in d]
    assert relayed and relayed[0]["worker_log"] == {"level": "INFO", "message": "hello"}, r.stderr
    assert relayed[0]["source"].startswith("sink")


# a worker logging with a time and level of its own (the project's text format), then the test loader
STAMPED_THEN_APPENDS = (
    "import sys, os; "
    "sys.stderr.write('2026-12-02 01:01:57,592 WARNING etlstage.rdss: row 7 late' + chr(10)); "
    "sys.stderr.write('2026-12-02T01:01:58.001Z INFO loaded 3 rows' + chr(10)); "
    "sys.stderr.write('plain words' + chr(10)); "
    "sys.stderr.flush(); os.execv(sys.argv[1], [sys.argv[1], sys.argv[2], 'append', 'out.txt'])"
)
STAMP = re.compile(r"\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d")


@pytest.mark.parametrize("fmt", ["text", "json"])
def test_a_workers_timestamped_line_is_shown_once_at_its_level_with_the_stages_label(pdir, fmt):
    pdir.write(
        """\
        stages:
          - {name: src, type: E, command: ["{PY}", "{TW}", count, "3"]}
          - {name: sink, type: L, command: ["{PY}", "-c", "{SCRIPT}", "{PY}", "{TW}"]}
        """.replace("{SCRIPT}", STAMPED_THEN_APPENDS)
    )
    r = pdir.etlstage("run", "stages.yaml", "--once", "--no-progress", "--log-format", fmt, timeout=60)
    assert r.code == 0, r.stderr
    lines = r.stderr.splitlines()
    late = next(line for line in lines if "row 7 late" in line)
    loaded = next(line for line in lines if "loaded 3 rows" in line)
    plain = next(line for line in lines if "plain words" in line)
    if fmt == "text":
        assert re.fullmatch(r"\S+ \S+ WARNING etlstage\.worker: \[sink\] etlstage\.rdss: row 7 late", late), late
        assert re.fullmatch(r"\S+ \S+ INFO etlstage\.worker: \[sink\] loaded 3 rows", loaded), loaded
        assert plain.endswith("INFO etlstage.worker: [sink] plain words"), plain
        assert all(len(STAMP.findall(line)) == 1 for line in (late, loaded, plain)), (late, loaded)
    else:
        doc = json.loads(late)
        assert (doc["level"], doc["message"]) == ("WARNING", "[sink] etlstage.rdss: row 7 late"), doc
        assert not STAMP.search(doc["message"]) and json.loads(loaded)["message"] == "[sink] loaded 3 rows"
