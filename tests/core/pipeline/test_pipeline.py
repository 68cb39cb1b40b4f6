"""Whole pipelines through the real `etlstage run`, every scenario of the protocol."""

from __future__ import annotations

import json
import sqlite3
import zlib

import pytest

from etlstage.protocol.partition import partition_of
from etlstage.protocol.pointer import parse_pointer
from tests.support.paths import EXAMPLES, FIXTURES, ROOT
from tests.support.run_cli import ETLSTAGE, etlstage


def expected_fanout(n: int) -> list[str]:
    out = []
    for i in range(n):
        k = i % 3
        out += [] if k == 0 else [f"{i}a", f"{i}b"] if k == 1 else [str(i)]
    return out


def test_plain_extract_single_transform_worker_driven_load(pdir):
    pdir.write("""
        stages:
          - {name: numbers, type: E, command: ["{PY}", "{TW}", count, "500"]}
          - {name: fan, type: T, mode: single, command: ["{PY}", "{TW}", fanout]}
          - {name: sink, type: L, mode: batch, batch_size: 7, batch_driver: worker,
             command: ["{PY}", "{TW}", append, out.txt]}
    """)
    r = pdir.run("--once")
    assert r.code == 0, r.stderr
    assert sorted(pdir.lines("out.txt")) == sorted(expected_fanout(500))
    assert "extracted 500 messages" in r.stderr


@pytest.mark.parametrize(
    "markers",
    [
        '{eom: "\\n", eop: 0x00, eob: 0x17, bnc: 0x11}',
        '{eom: "|", eop: "#", eob: "~", bnc: "^"}',
        "{eom: 0x1e, eop: 0x03, eob: 0x04, bnc: 0x05}",
    ],
    ids=["default", "printable", "control"],
)
def test_cyclic_worker_offsets_supervisor_batches_and_markers(pdir, markers):
    pdir.write(f"""
        markers: {markers}
        stages:
          - {{name: numbers, type: E, mode: cyclic, command: ["{{PY}}", "{{TW}}", count, "95", "10"]}}
          - {{name: up, type: T, mode: batch, batch_size: 4, command: ["{{PY}}", "{{TW}}", fanout]}}
          - {{name: sink, type: L, mode: batch, batch_size: 3, batch_driver: worker,
              command: ["{{PY}}", "{{TW}}", append, out.txt]}}
    """)
    r = pdir.run("--once")
    assert r.code == 0, r.stderr
    assert sorted(pdir.lines("out.txt")) == sorted(expected_fanout(95))
    # the worker committed its offsets as each next request arrived; 10 windows of data + 1 empty
    assert (pdir.path / ".etlstage/stages/stages/numbers/offset-0").read_text() == "95"
    db = sqlite3.connect(pdir.path / ".etlstage/stages/state.db")
    (done,) = db.execute("SELECT window_seq FROM checkpoints WHERE source='numbers'").fetchone()
    assert done == 11
    # a second run resumes after the committed offsets: nothing new
    r = pdir.run("--once")
    assert r.code == 0, r.stderr
    assert len(pdir.lines("out.txt")) == len(expected_fanout(95))


def test_stage_markers_override_pipeline_markers(pdir):
    pdir.write("""
        markers: {eom: "|", eop: "#", eob: "~", bnc: "^"}
        stages:
          - {name: numbers, type: E, command: ["{PY}", "{TW}", count, "50"]}
          - {name: up, type: T, mode: batch, batch_size: 5, batch_driver: worker,
             markers: {eom: "\\n", eop: 0, eob: 0x17, bnc: 0x11}, command: ["{PY}", "{TW}", upper]}
          - {name: sink, type: L, command: ["{PY}", "{TW}", append, out.txt]}
    """)
    r = pdir.run("--once")
    assert r.code == 0, r.stderr
    assert sorted(pdir.lines("out.txt"), key=int) == [str(i) for i in range(50)]


def test_supervisor_offsets_counter_policy_commits_and_resumes(pdir):
    pdir.write("""
        max_inflight_windows: 3
        stages:
          - name: numbers
            type: E
            mode: cyclic
            offsets: supervisor
            offset_policy: {type: counter, start: 0, step: 7}
            command: ["{PY}", "{TW}", count, "60"]
          - {name: sink, type: L, mode: batch, batch_size: 10, command: ["{PY}", "{TW}", batches, b.jsonl]}
    """)
    r = pdir.run("--once")
    assert r.code == 0, r.stderr
    batches = [json.loads(line) for line in pdir.lines("b.jsonl")]
    assert sorted(int(m) for b in batches for m in b) == list(range(60))
    # a batch never waits for a later window (barrier): one cut short of 10 ends where a window
    # of 7 ends. A batch takes what is already there, so when the sink lags (its first 0.3 s of
    # start-up quiet, a loaded machine) a full batch may hold two windows' messages; once it
    # keeps up, batches are single windows of 7, which waiting for a later one would never give
    for b in batches:
        got = sorted(int(m) for m in b)
        assert got == list(range(got[0], got[-1] + 1)), got
        assert len(got) == 10 or (got[-1] + 1) % 7 == 0 or got[-1] == 59, got
    later = [sorted(int(m) for m in b) for b in batches if min(int(m) for m in b) >= 21]
    assert any(b == list(range(b[0], b[0] + 7)) and b[0] % 7 == 0 for b in later), later
    db = sqlite3.connect(pdir.path / ".etlstage/stages/state.db")
    (end,) = db.execute("SELECT committed_end FROM checkpoints WHERE source='numbers'").fetchone()
    assert json.loads(end) == 70  # [56, 63) held 56..59; the empty [63, 70) ended the run and is committed too
    r = pdir.run("--once")
    assert r.code == 0
    assert len([m for line in pdir.lines("b.jsonl") for m in json.loads(line)]) == 60


def test_time_policy_requests_iso_ranges(pdir):
    pdir.write("""
        stages:
          - name: clock
            type: E
            mode: cyclic
            offsets: supervisor
            offset_policy: {type: time, start: "2026-01-01T00:00:00Z", step: PT6H, lag: PT0S}
            command: ["{PY}", echo.py]
          - {name: sink, type: L, command: ["{PY}", "{TW}", append, out.txt]}
    """)
    (pdir.path / "echo.py").write_text(
        "import sys\n"
        "for line in iter(sys.stdin.buffer.readline, b''):\n"
        "    sys.stdout.buffer.write(line + b'\\x00')\n"
        "    sys.stdout.flush()\n"
    )
    # the worker echoes each request once; requests never stop (time keeps going), so stop it
    import signal as sig
    import subprocess
    import time

    proc = subprocess.Popen(
        [*ETLSTAGE, "run", "stages.yaml", "--no-progress"],
        cwd=pdir.path,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.time() + 30
    while time.time() < deadline and len(pdir.lines("out.txt")) < 8:
        time.sleep(0.2)
    proc.send_signal(sig.SIGTERM)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    first = [json.loads(line) for line in pdir.lines("out.txt")[:3]]
    assert first[0] == {"start": "2026-01-01T00:00:00Z", "end": "2026-01-01T06:00:00Z"}
    assert first[1]["start"] == first[0]["end"] and first[2]["end"] == "2026-01-01T18:00:00Z"


def test_empty_messages_and_partial_batches_closed_by_linger(pdir):
    pdir.write("""
        stages:
          - {name: src, type: E, command: ["{PY}", "-c", "import sys; sys.stdout.write(chr(10).join(['a', '', '', 'b', '']))"]}
          - {name: t, type: T, mode: batch, batch_size: 100, linger: 0.05, command: ["{PY}", "{TW}", upper]}
          - {name: sink, type: L, mode: batch, batch_size: 100, command: ["{PY}", "{TW}", batches, b.jsonl]}
    """)
    r = pdir.run("--once")
    assert r.code == 0, r.stderr
    assert [json.loads(x) for x in pdir.lines("b.jsonl")] == [["A", "", "", "B"]]


def test_several_transforms_and_instances_partitioned_by_key(pdir):
    src = "import json,sys; [print(json.dumps({'k': i % 5, 'i': i})) for i in range(300)]"
    pdir.write(f"""
        stages:
          - {{name: src, type: E, command: ["{{PY}}", "-c", "{src}"]}}
          - {{name: t1, type: T, mode: batch, batch_size: 8, instances: 3, partition_by: /k,
              command: ["{{PY}}", "{{TW}}", pass]}}
          - {{name: t2, type: T, mode: single, instances: 2, command: ["{{PY}}", "{{TW}}", pass]}}
          - {{name: sink, type: L, mode: batch, batch_size: 50, command: ["{{PY}}", "{{TW}}", append, out.txt]}}
    """)
    r = pdir.run("--once")
    assert r.code == 0, r.stderr
    docs = [json.loads(x) for x in pdir.lines("out.txt")]
    assert sorted(d["i"] for d in docs) == list(range(300))


def test_partition_by_the_whole_message(pdir):
    """``partition_by: ""`` is the pointer to the whole document, not "unset": each message
    goes to the instance its own hash names (round-robin would spread copies of one value)."""
    pdir.write("""
        stages:
          - {name: src, type: E, command: ["{PY}", "-c", "[print(i % 4) for i in range(40)]"]}
          - {name: keyed, type: L, instances: 3, partition_by: "",
             command: [sh, -c, 'exec "{PY}" "{TW}" append "got-$ETLSTAGE_INSTANCE.txt"']}
    """)
    r = pdir.run("--once")
    assert r.code == 0, r.stderr
    for value in range(4):
        holders = sorted({i for i in range(3) if str(value) in pdir.lines(f"got-{i}.txt")})
        assert holders == [partition_of(str(value).encode(), 3)], (value, holders)


def test_two_loaders_each_receive_every_message(pdir):
    pdir.write("""
        stages:
          - {name: src, type: E, command: ["{PY}", "{TW}", count, "100"]}
          - {name: a, type: L, mode: batch, batch_size: 9, command: ["{PY}", "{TW}", append, a.txt]}
          - {name: b, type: L, command: ["{PY}", "{TW}", append, b.txt]}
    """)
    r = pdir.run("--once")
    assert r.code == 0, r.stderr
    assert sorted(pdir.lines("a.txt"), key=int) == sorted(pdir.lines("b.txt"), key=int) == [str(i) for i in range(100)]


def test_placeholders_in_commands(pdir):
    pdir.write("""
        stages:
          - {name: src, type: E, command: ["{PY}", "-c", "import sys; print(sys.argv[1:])", "{eom}", "{stage}", "{type}"]}
          - {name: sink, type: L, command: ["{PY}", "{TW}", append, out.txt]}
    """)
    r = pdir.run("--once")
    assert r.code == 0, r.stderr
    assert pdir.lines("out.txt") == ["['0a', 'src', 'E']"]


def test_kcl_multilang_stage_option_wraps_a_multilangdaemon_processor(pdir):
    child = pdir.path.parent / "mld_child.js"
    import shutil

    shutil.copy(FIXTURES / "kcl_children" / "mld_child.js", child)
    pdir.write(f"""
        stages:
          - {{name: src, type: E, command: ["{{PY}}", "{{TW}}", count, "120"]}}
          - {{name: kcl, type: L, mode: batch, batch_size: 25, protocol: kcl-multilang, protocol_version: 1,
              env: {{KCL_TEST_OUT: records.txt}}, command: [node, "{child}", v1]}}
    """)
    r = pdir.run("--once")
    assert r.code == 0, r.stderr
    records = pdir.lines("records.txt")
    assert len([x for x in records if x.startswith("RECORD")]) == 120, records[:5]


def test_the_example_workers_first_pipeline_runs_to_the_end(tmp_path):
    import shutil

    root = ROOT
    work = tmp_path / "examples"
    shutil.copytree(root / "workers" / "examples", work)
    r = etlstage(work, "run", "first-pipeline.yaml", "--once", "--no-progress", timeout=300)
    assert r.code == 0, r.stderr
    lines = (work / "output" / "numbers.txt").read_text().splitlines()
    assert sorted(int(x) for x in lines) == list(range(1, 100001))


@pytest.mark.parametrize(
    "extract, transform, load",
    [
        (["sh", "count.sh", "300", "40"], ["{c}/upper"], ["{c}/append", "out.txt"]),  # sh -> C -> C, cyclic
        (["sh", "count.sh", "300"], ["sh", "upper.sh"], ["python", "append.py", "out.txt"]),  # sh -> awk -> SDK
        (["python", "count.py", "300"], ["node", "upper.js"], ["{c}/append", "out.txt"]),  # SDK -> Node -> C
    ],
    ids=["sh-c-c", "sh-awk-python", "python-node-c"],
)
def test_example_workers_in_every_language_run_in_a_pipeline(tmp_path, c_build, extract, transform, load):
    import shutil

    import yaml

    work = tmp_path / "examples"
    shutil.copytree(EXAMPLES, work)

    def argv(parts: list[str]) -> list[str]:
        return [p.format(c=c_build) for p in parts]

    cyclic = len(extract) == 4
    t_mode = (
        {"mode": "single"} if "upper.sh" in transform else {"mode": "batch", "batch_size": 7, "batch_driver": "worker"}
    )
    doc = {
        "stages": [
            {"name": "numbers", "type": "E", "mode": "cyclic" if cyclic else "plain", "command": argv(extract)},
            {"name": "upper", "type": "T", "command": argv(transform), **t_mode},
            {"name": "sink", "type": "L", "mode": "batch", "batch_size": 50, "command": argv(load)},
        ]
    }
    (work / "p.yaml").write_text(yaml.safe_dump(doc))
    r = etlstage(work, "run", "p.yaml", "--once", "--no-progress", timeout=300)
    assert r.code == 0, r.stderr
    assert sorted(int(x) for x in (work / "out.txt").read_text().split()) == list(range(1, 301))


def test_syslog_log_format_writes_rfc5424_lines_and_reaches_the_workers(pdir):
    import re

    pdir.write("""
        stages:
          - {name: src, type: E, command: ["{PY}", "-c", "import os, sys; print(os.environ['ETLSTAGE_LOG_FORMAT'])"]}
          - {name: sink, type: L, command: ["{PY}", "{TW}", append, out.txt]}
    """)
    r = pdir.etlstage(
        "run", "stages.yaml", "--once", "--no-progress", "--log-format", "syslog", "--syslog-facility", "local3"
    )
    assert r.code == 0, r.stderr
    assert pdir.lines("out.txt") == ["syslog"]
    line = re.compile(
        r"^<15[0-9]>1 \d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z \S+ etlstage-\d+\.\d+\.\d+ \d+ - - \[(INFO|WARNING)\] "
    )
    logged = [x for x in r.stderr.splitlines() if x.startswith("<")]
    assert logged and all(line.match(x) for x in logged), logged[:3]


def test_worker_reports_are_summed_over_this_runs_processes_in_the_summary(pdir):
    pdir.write("""
        stages:
          - {name: src, type: E, command: ["{PY}", "{TW}", count, "100"]}
          - {name: t, type: T, mode: batch, batch_size: 7, instances: 3, command: ["{PY}", "{TW}", counting]}
          - {name: sink, type: L, command: ["{PY}", "{TW}", append, out.txt]}
    """)
    stage_dir = pdir.path / ".etlstage" / "stages" / "stages" / "t"
    stage_dir.mkdir(parents=True)
    (stage_dir / "report-0-999999.json").write_text('{"seen": 1000}')  # an earlier run's process: ignored
    r = pdir.run("--once")
    assert r.code == 0, r.stderr
    assert "t: seen 100, by size (short 0)" in r.stderr
    assert len(list(stage_dir.glob("report-*.json"))) >= 2


def test_partition_by_assignments_are_pinned():
    """A key's instance must not change between versions: a stage's per-instance state (the
    RDSS sequence store) would no longer meet the key's later messages."""
    from etlstage.protocol.partition import partition_key as _partition_key

    tokens = parse_pointer("/h/seq")
    expected = {
        b'{"h":{"seq":"a"}}': (b'"a"', 1),
        b'{"h":{"seq":"b"}}': (b'"b"', 0),
        b'{"h":{"seq":7}}': (b"7", 0),
        b'{"h":{}}': (b"null", 1),  # absent: all such messages meet on one instance
        b"not json": (b"not json", 1),  # its own key
        b'{"h":{"seq":{"y":1,"x":2}}}': (b'{"x": 2, "y": 1}', 0),  # canonical JSON: member order does not matter
    }
    for message, (key, instance) in expected.items():
        assert _partition_key(message, tokens) == key
        assert zlib.crc32(key) % 3 == instance
