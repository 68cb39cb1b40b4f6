"""How a worker's end is reported: one that never answered stops the stage at once with
its own words; one killed by a signal is said to be."""

from __future__ import annotations

import time

import pytest


def missing_script_pipeline(pdir, where: str) -> None:
    broken = '["{PY}", missing_script.py]'
    ok_t = '["{PY}", "{TW}", upper]'
    pdir.write(f"""
        stages:
          - {{name: src, type: E, command: {broken if where == "E" else '["{PY}", "{TW}", count, "10"]'}}}
          - {{name: t, type: T, command: {broken if where == "T" else ok_t}}}
          - {{name: sink, type: L, command: {broken if where == "L" else '["{PY}", "{TW}", append, out.txt]'}}}
    """)


@pytest.mark.parametrize("where", ["E", "T", "L"])
def test_a_worker_that_exits_before_its_first_answer_stops_the_stage_at_once_with_its_stderr(pdir, where):
    missing_script_pipeline(pdir, where)
    started = time.monotonic()
    r = pdir.run("--once", timeout=60)
    assert r.code == 1, r.stderr
    assert time.monotonic() - started < 15  # no six restarts with backoff (32 s)
    failed = r.stderr.split("pipeline failed: ", 1)[1]
    headline = failed.splitlines()[0]
    name = {"E": "src", "T": "t", "L": "sink"}[where]
    assert headline.startswith(f"{name} exited before its first request: "), headline
    assert "can't open file" in headline and "missing_script.py" in headline, headline
    assert "restart" not in r.stderr.split("pipeline failed")[0]


def test_a_worker_killed_by_a_signal_is_reported_as_killed_not_exited(pdir, tmp_path):
    flag = tmp_path / "killed-once"
    script = tmp_path / "kill_self.py"
    script.write_text(
        "import os, signal, sys\n"
        f"FLAG = {str(flag)!r}\n"
        "eom = bytes.fromhex(os.environ['ETLSTAGE_EOM']); eop = bytes.fromhex(os.environ['ETLSTAGE_EOP'])\n"
        "n = 0\n"
        "for line in sys.stdin.buffer:\n"
        "    n += 1\n"
        "    sys.stdout.buffer.write(line.rstrip(eom) + eom + eop); sys.stdout.buffer.flush()\n"
        "    if n == 3 and not os.path.exists(FLAG):\n"
        "        open(FLAG, 'w').close(); os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    pdir.write(f"""
        stages:
          - {{name: src, type: E, command: ["{{PY}}", "{{TW}}", count, "10"]}}
          - {{name: t, type: T, prefetch: 1, restart: {{backoff: 0.05}}, command: ["{{PY}}", "{script}"]}}
          - {{name: sink, type: L, command: ["{{PY}}", "{{TW}}", append, out.txt]}}
    """)
    r = pdir.run("--once", timeout=60)
    assert r.code == 0, r.stderr
    assert flag.exists()
    assert "t failed (t was killed by signal 9 (SIGKILL)" in r.stderr, r.stderr
    assert "exited while waiting" not in r.stderr and "exited with requests" not in r.stderr
    assert sorted(int(x) for x in set(pdir.lines("out.txt"))) == list(range(10))


def test_what_a_failing_worker_said_is_shown_at_log_level_warning(pdir, tmp_path):
    flag = tmp_path / "crashed-once"
    script = tmp_path / "crash_once.py"
    script.write_text(
        "import os, sys\n"
        f"FLAG = {str(flag)!r}\n"
        "eom = bytes.fromhex(os.environ['ETLSTAGE_EOM']); eop = bytes.fromhex(os.environ['ETLSTAGE_EOP'])\n"
        "for n, line in enumerate(sys.stdin.buffer, 1):\n"
        "    if n == 3 and not os.path.exists(FLAG):\n"
        "        open(FLAG, 'w').close(); print('enrich: lookup table corrupt at row 7', file=sys.stderr); sys.exit(3)\n"
        "    sys.stdout.buffer.write(line.rstrip(eom) + eom + eop); sys.stdout.buffer.flush()\n"
    )
    pdir.write(f"""
        stages:
          - {{name: src, type: E, command: ["{{PY}}", "{{TW}}", count, "10"]}}
          - {{name: t, type: T, prefetch: 1, restart: {{backoff: 0.05}}, command: ["{{PY}}", "{script}"]}}
          - {{name: sink, type: L, command: ["{{PY}}", "{{TW}}", append, out.txt]}}
    """)
    r = pdir.run("--once", "--log-level", "WARNING", timeout=60)
    assert r.code == 0, r.stderr
    assert flag.exists()
    assert "t failed (t exited with requests unanswered: enrich: lookup table corrupt at row 7)" in r.stderr, r.stderr
    assert "| enrich: lookup table corrupt at row 7" in r.stderr, r.stderr
    assert sorted(int(x) for x in set(pdir.lines("out.txt"))) == list(range(10))


@pytest.mark.parametrize(
    ("command", "expected"),
    [
        ('["{PY}", missing_script.py]', "script 'missing_script.py' (given to python"),
        ("[perl, -w, enrich_missing.pl]", "script 'enrich_missing.pl' (given to perl) does not exist"),
        ("[no-such-program-here, x]", "program 'no-such-program-here' is not on the PATH the run uses"),
    ],
)
def test_validate_finds_a_missing_program_or_script(pdir, command, expected):
    pdir.write(f"""
        stages:
          - {{name: src, type: E, command: ["{{PY}}", "{{TW}}", count, "3"]}}
          - {{name: t, type: T, command: {command}}}
          - {{name: sink, type: L, command: ["{{PY}}", "{{TW}}", append, out.txt]}}
    """)
    r = pdir.etlstage("validate", "stages.yaml")
    assert r.code == 2, r.stdout + r.stderr
    assert "stage 't': command [" in r.stderr and expected in r.stderr, r.stderr
    assert "Traceback" not in r.stderr


def test_validate_accepts_inline_programs_and_modules(pdir):
    pdir.write("""
        stages:
          - {name: src, type: E, command: ["{PY}", "-c", "print(1)"]}
          - {name: t, type: T, command: ["{PY}", -m, etlstage.cli]}
          - {name: sink, type: L, command: [sh, -c, "cat > /dev/null"]}
    """)
    r = pdir.etlstage("validate", "stages.yaml")
    assert r.code == 0, r.stderr


BANNER_E = """\
import os, sys
eom = bytes.fromhex(os.environ["ETLSTAGE_EOM"]); eop = bytes.fromhex(os.environ["ETLSTAGE_EOP"])
out = sys.stdout.buffer
out.write(b"extractor v1 ready" + eom); out.flush()  # a start-up banner on stdout
cycles = 0
for request in sys.stdin.buffer:
    cycles += 1
    out.write((b"a" + eom + b"b" + eom if cycles == 1 else b"") + eop); out.flush()
"""

BANNER_T = """\
import os, sys
eom = bytes.fromhex(os.environ["ETLSTAGE_EOM"]); eop = bytes.fromhex(os.environ["ETLSTAGE_EOP"])
out = sys.stdout.buffer
out.write(b"transformer v1 ready" + eom); out.flush()  # a start-up banner on stdout
for line in sys.stdin.buffer:
    out.write(line.rstrip(eom) + eom + eop); out.flush()
"""


@pytest.mark.parametrize("where", ["E", "T"])
def test_a_start_up_banner_is_a_violation_in_a_run_as_in_check_worker(pdir, tmp_path, where):
    script = tmp_path / "banner.py"
    script.write_text(BANNER_E if where == "E" else BANNER_T)
    fast = "restart: {max_restarts: 1, backoff: 0.05}"
    src = (
        f'mode: cyclic, {fast}, command: ["{{PY}}", "{script}"]'
        if where == "E"
        else 'command: [sh, -c, "echo a; echo b"]'
    )
    pdir.write(f"""
        stages:
          - {{name: src, type: E, {src}}}
          - {{name: t, type: T, {fast}, command: {'["{PY}", "' + str(script) + '"]' if where == "T" else '["{PY}", "{TW}", upper]'}}}
          - {{name: sink, type: L, command: ["{{PY}}", "{{TW}}", append, out.txt]}}
    """)
    r = pdir.run("--once", timeout=60)
    assert r.code == 1, r.stderr
    assert "no request outstanding" in r.stderr and "v1 ready" in r.stderr, r.stderr
    assert not any("ready" in line.lower() for line in pdir.lines("out.txt"))


# 0: at once; 0.15: within the start-up quiet, once the first batch waits for the worker
@pytest.mark.parametrize("after", [0.0, 0.15])
def test_a_worker_killed_by_a_signal_before_its_first_answer_is_restarted(pdir, tmp_path, after):
    flag = tmp_path / "killed-once"
    script = tmp_path / "killed_at_start.py"
    script.write_text(
        "import os, signal, sys, time\n"
        f"FLAG = {str(flag)!r}\n"
        "if not os.path.exists(FLAG):\n"
        f"    time.sleep({after}); open(FLAG, 'w').close(); os.kill(os.getpid(), signal.SIGKILL)\n"
        "eom = bytes.fromhex(os.environ['ETLSTAGE_EOM']); eop = bytes.fromhex(os.environ['ETLSTAGE_EOP'])\n"
        "for line in sys.stdin.buffer:\n"
        "    sys.stdout.buffer.write(line.rstrip(eom) + eom + eop); sys.stdout.buffer.flush()\n"
    )
    pdir.write(f"""
        stages:
          - {{name: src, type: E, command: ["{{PY}}", "{{TW}}", count, "10"]}}
          - {{name: t, type: T, restart: {{backoff: 0.05}}, command: ["{{PY}}", "{script}"]}}
          - {{name: sink, type: L, command: ["{{PY}}", "{{TW}}", append, out.txt]}}
    """)
    r = pdir.run("--once", timeout=60)
    assert r.code == 0, r.stderr
    assert flag.exists() and "t failed (t was killed by signal 9 (SIGKILL)" in r.stderr, r.stderr
    assert sorted(int(x) for x in pdir.lines("out.txt")) == list(range(10))
