"""Workers that crash, hang, write garbage or break the protocol; clear errors, nothing lost."""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import signal
import subprocess
import time

import psutil
import pytest

from tests.support.run_cli import ETLSTAGE

FAST_RESTART = "restart: {max_restarts: 2, backoff: 0.05}"


def assert_at_least_once(lines: list[str], expected: list[int], may_repeat: range) -> None:
    """Every expected message arrived; a worker failure may send again, once, what it had
    answered since it was last known to be in step (never anything else, never more)."""
    got = [int(x) for x in lines]
    assert sorted(set(got)) == sorted(expected)
    repeated = {m for m in got if got.count(m) > 1}
    assert repeated <= set(may_repeat), sorted(repeated)
    assert all(got.count(m) <= 2 for m in repeated)


def three_stages(t_command: str, extra: str = "", n: int = 40) -> str:
    return f"""
        stages:
          - {{name: src, type: E, command: ["{{PY}}", "{{TW}}", count, "{n}"]}}
          - {{name: t, type: T, mode: batch, batch_size: 5, {FAST_RESTART}, {extra}
              command: {t_command}}}
          - {{name: sink, type: L, command: ["{{PY}}", "{{TW}}", append, out.txt]}}
    """


@pytest.mark.parametrize(
    "behaviour, expected",
    [
        ("garbage", "the worker wrote EOB (0x17)"),
        ("no-eom", "were not ended by EOM"),
        ("exit-early", "exited with requests unanswered"),
        ("marker-in-result", "BNC (0x11) but this stage is not in worker-driven batch mode"),
    ],
)
def test_protocol_violations_name_stage_command_pid_status_bytes_and_stderr(pdir, behaviour, expected):
    pdir.write(three_stages(f'["{{PY}}", "{{TW}}", {behaviour}]'))
    r = pdir.run("--once")
    assert r.code == 1
    assert expected in r.stderr
    for part in ("stage: t (T-stage, mode batch", "command: [", "pid: ", "exit status: ", "stderr"):
        assert part in r.stderr, part
    assert "Traceback" not in r.stderr.split("pipeline failed")[-1]


def test_a_hanging_worker_times_out(pdir):
    pdir.write(three_stages('["{PY}", "{TW}", hang]', "timeouts: {startup: 1, request: 1},"))
    started = time.monotonic()
    r = pdir.run("--once", timeout=60)
    assert r.code == 1
    assert "did not answer within its start-up timeout of 1s" in r.stderr
    assert time.monotonic() - started < 30


def timed_t(t_command: str, timeouts: str, n: int, mode: str) -> str:
    return f"""
        stages:
          - {{name: src, type: E, command: ["{{PY}}", "{{TW}}", count, "{n}"]}}
          - {{name: t, type: T, {mode}, restart: {{max_restarts: 0}}, timeouts: {timeouts},
              command: {t_command}}}
          - {{name: sink, type: L, command: ["{{PY}}", "{{TW}}", append, out.txt]}}
    """


BATCHES_OF_2 = "mode: batch, batch_size: 2"


@pytest.mark.parametrize(
    ("timeouts", "expected"),
    [
        ("{startup: 30, request: 1}", "request timeout of 1s"),
        ("{startup: 30, request: 30, idle: 1}", "idle timeout of 1s (no output)"),  # before the request one
    ],
    ids=["request", "idle"],
)
def test_a_later_request_that_gets_no_answer_times_out(pdir, timeouts, expected):
    pdir.write(timed_t('["{PY}", "{TW}", hang-after-first]', timeouts, 4, BATCHES_OF_2))
    started = time.monotonic()
    r = pdir.run("--once", timeout=60)
    assert r.code == 1
    assert f"did not answer within its {expected}" in r.stderr
    assert time.monotonic() - started < 25  # not the 30 s start-up (or request) limit


def test_any_output_keeps_an_idle_timeout_from_firing(pdir):
    # each answer takes 1.2 s, a byte every 0.4 s: longer than the idle limit, never silent for it
    pdir.write(timed_t('["{PY}", "{TW}", dribble]', "{startup: 30, request: 30, idle: 1}", 2, "mode: single"))
    r = pdir.run("--once", timeout=60)
    assert r.code == 0, r.stderr
    assert pdir.lines("out.txt") == ["0", "1"]


@pytest.mark.parametrize("driver", ["supervisor", "worker"])
def test_crash_mid_batch_is_restarted_and_the_batch_sent_again(pdir, tmp_path, driver):
    # crashes the first time it sees message 17, then (flag file present) works
    flag = tmp_path / "crashed-once"
    script = tmp_path / "flaky.py"
    script.write_text(
        "import os, sys\n"
        "from etlstage.worker import run_transformer\n"
        f"FLAG = {str(flag)!r}\n"
        "def f(ms):\n"
        "    if b'17' in ms and not os.path.exists(FLAG):\n"
        "        open(FLAG, 'w').close(); os._exit(9)\n"
        "    return ms\n"
        "run_transformer(f)\n"
    )
    pdir.write(three_stages(f'["{{PY}}", "{script}"]', f"batch_driver: {driver},"))
    r = pdir.run("--once")
    assert r.code == 0, r.stderr
    assert flag.exists()
    assert_at_least_once(pdir.lines("out.txt"), list(range(40)), may_repeat=range(20))
    assert "restart; its job is sent again (try 2 of 3)" in r.stderr


def test_a_message_holding_the_next_stages_marker_is_refused_before_it_is_written(pdir):
    pdir.write("""
        stages:
          - {name: src, type: E, command: ["{PY}", "-c", "print('fine'); print('has|pipe')"],
             restart: {max_restarts: 0}}
          - {name: sink, type: L, markers: {eom: "|"}, command: ["{PY}", "{TW}", append, out.txt]}
    """)
    r = pdir.run("--once")
    assert r.code == 1
    assert "stage 'sink' contains its EOM marker 0x7c" in r.stderr


def test_poison_message_goes_to_the_dead_letter_store_and_the_rest_is_loaded(pdir):
    pdir.write(three_stages('["{PY}", "{TW}", poison, "13"]', "on_failure: deadletter,"))
    r = pdir.run("--once")
    assert r.code == 0, r.stderr
    # the poison's answered neighbours are sent again, and their results not handed on twice
    assert sorted(int(x) for x in pdir.lines("out.txt")) == [i for i in range(40) if i != 13]
    listing = pdir.etlstage("deadletter", "list")
    assert listing.code == 0 and "stage 't' 1 message(s)" in listing.stdout
    shown = pdir.etlstage("deadletter", "show", "1")
    assert "  13" in shown.stdout and "poison message" in shown.stdout
    status = pdir.etlstage("status")
    assert "dead letters: 1 (1 new)" in status.stdout
    # the poison's neighbours were sent again: the summary says how many, and to which stage
    resent = re.search(r"sent again after a worker failure: (\d+) message\(s\) to stage 't'", r.stderr)
    assert resent, r.stderr
    withheld = re.search(r"not handed on again \(the same results went on before the failure\): (\d+)", r.stderr)
    assert withheld and int(resent.group(1)) >= int(withheld.group(1)) > 0, r.stderr


def test_poison_message_under_fail_policy_stops_with_nothing_committed_past_it(pdir):
    pdir.write(three_stages('["{PY}", "{TW}", poison, "13"]', "on_failure: fail,"))
    r = pdir.run("--once")
    assert r.code == 1
    assert "on_failure=fail stops the pipeline" in r.stderr
    loaded = pdir.lines("out.txt")
    assert len(loaded) == len(set(loaded)) and "13" not in loaded  # nothing handed on twice
    status = pdir.etlstage("status")
    assert "checkpoints: none yet" in status.stdout


def test_worker_ignoring_sigterm_is_killed_at_stop(pdir):
    pdir.write("""
        stages:
          - {name: src, type: E, command: ["{PY}", "{TW}", count, "3"]}
          - {name: sink, type: L, stop_timeout: 0.5, command: ["{PY}", "{TW}", ignore-term]}
    """)
    started = time.monotonic()
    r = pdir.run("--once", timeout=60)
    assert r.code == 0, r.stderr
    assert "ignored SIGTERM" in r.stderr
    assert time.monotonic() - started < 30


def test_a_failed_run_kills_every_worker_even_one_that_ignores_eof_and_sigterm(pdir):
    """A stage that fails ends the run at once: the workers still running are killed and
    reaped before it exits, not left behind (this sink outlives its stdin and SIGTERM)."""
    pdir.write("""
        stages:
          - {name: src, type: E, command: ["{PY}", "{TW}", count, "40"]}
          - {name: t, type: T, restart: {max_restarts: 0}, command: ["{PY}", "{TW}", exit-early]}
          - {name: sink, type: L, command: ["{PY}", "{TW}", ignore-term]}
    """)
    started = time.monotonic()
    r = pdir.run("--once", timeout=60)
    assert r.code == 1, r.stderr
    assert "pipeline failed: stage 't': a request of 40 message(s) failed" in r.stderr, r.stderr
    assert time.monotonic() - started < 30
    here = str(pdir.path)
    left = []
    for p in psutil.process_iter():
        with contextlib.suppress(psutil.Error):
            if p.cwd() == here:
                left.append(p)
    _, alive = psutil.wait_procs(left, timeout=5)
    assert not alive, [p.cmdline() for p in alive]


def test_no_orphans_after_the_supervisor_is_killed(pdir):
    pdir.write("""
        stages:
          - {name: src, type: E, mode: cyclic, poll_interval: 0.2, command: ["{PY}", "{TW}", count, "10"]}
          - {name: t, type: T, instances: 2, command: ["{PY}", "{TW}", pass]}
          - {name: sink, type: L, command: ["{PY}", "{TW}", ignore-term]}
    """)
    proc = subprocess.Popen(
        [*ETLSTAGE, "run", "stages.yaml", "--no-progress"],
        cwd=pdir.path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.time() + 30
        children: list[psutil.Process] = []
        while time.time() < deadline and len(children) < 4:
            time.sleep(0.2)
            children = psutil.Process(proc.pid).children(recursive=True)
        assert len(children) >= 4
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
        gone, alive = psutil.wait_procs(children, timeout=10)
        assert not alive, [p.cmdline() for p in alive]
    finally:
        if proc.poll() is None:
            proc.kill()


def test_sigterm_stops_an_endless_pipeline_gracefully(pdir):
    pdir.write("""
        stages:
          - {name: src, type: E, mode: cyclic, poll_interval: 0.1, command: ["{PY}", "{TW}", count, "1000000", "50"]}
          - {name: sink, type: L, mode: batch, batch_size: 100, command: ["{PY}", "{TW}", append, out.txt]}
    """)
    proc = subprocess.Popen(
        [*ETLSTAGE, "run", "stages.yaml", "--no-progress"],
        cwd=pdir.path,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.time() + 30
    while time.time() < deadline and len(pdir.lines("out.txt")) < 500:
        time.sleep(0.1)
    # `status` reads the running supervisor from the state store, as its heartbeat last wrote it
    deadline = time.time() + 15
    while True:
        status = pdir.etlstage("status")
        if "MB cpu" in status.stdout or time.time() > deadline:  # the first periodic beat samples resources
            break
        time.sleep(0.2)
    assert f"running: pid {proc.pid}" in status.stdout, status.stdout
    assert "MB cpu" in status.stdout and "windows in flight:" in status.stdout
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert "stopping gracefully" in err
    loaded = [int(x) for x in pdir.lines("out.txt")]
    assert loaded == list(range(len(loaded)))  # in order, nothing skipped
    committed = int((pdir.path / ".etlstage/stages/stages/src/offset-0").read_text())
    assert committed <= len(loaded)  # never committed past what was loaded


def test_dead_letters_replayed_after_the_fix_reach_the_loader(pdir, tmp_path):
    def pipeline(t_command: str) -> str:
        return f"""
            stages:
              - {{name: src, type: E, mode: cyclic, command: ["{{PY}}", "{{TW}}", count, "40", "10"]}}
              - {{name: t, type: T, mode: batch, batch_size: 5, {FAST_RESTART}, on_failure: deadletter,
                  command: {t_command}}}
              - {{name: sink, type: L, command: ["{{PY}}", "{{TW}}", append, out.txt]}}
        """

    pdir.write(pipeline('["{PY}", "{TW}", poison, "13"]'))
    assert pdir.run("--once").code == 0
    assert "13" not in pdir.lines("out.txt")
    assert_at_least_once(pdir.lines("out.txt"), [i for i in range(40) if i != 13], may_repeat=range(15))
    before = len(pdir.lines("out.txt"))
    # the transformer is fixed; the dead letter is replayed by the next run (nothing new to extract)
    pdir.write(pipeline('["{PY}", "{TW}", pass]'))
    r = pdir.etlstage("deadletter", "replay", "--all")
    assert r.code == 0 and "1 dead letter(s) will be sent again" in r.stdout
    r = pdir.run("--once")
    assert r.code == 0, r.stderr
    assert pdir.lines("out.txt")[before:] == ["13"]  # the replay sends the dead letter alone
    assert "[replayed]" in pdir.etlstage("deadletter", "list").stdout


# a pass-through T-worker that grows by 8 MB (touched) per batch: over max_rss after a few
GROW = (
    "import time\n"
    "from etlstage.worker import run_transformer\n"
    "hoard = []\n"
    "def f(ms):\n"
    '    hoard.append(b"x" * (8 << 20))\n'
    "    time.sleep(0.05)\n"
    "    return ms\n"
    "run_transformer(f)\n"
)


def test_a_worker_over_max_rss_is_replaced_between_batches(pdir, tmp_path):
    script = tmp_path / "grow.py"
    script.write_text(GROW)
    pdir.write(f"""
        stages:
          - {{name: src, type: E, command: ["{{PY}}", "{{TW}}", count, "400"]}}
          - {{name: t, type: T, mode: batch, batch_size: 10, max_rss: 60MiB, prefetch: 1,
              command: ["{{PY}}", "{script}"]}}
          - {{name: sink, type: L, command: ["{{PY}}", "{{TW}}", append, out.txt]}}
    """)
    r = pdir.run("--once")
    assert r.code == 0, r.stderr
    assert sorted(pdir.lines("out.txt"), key=int) == [str(i) for i in range(400)]
    assert "over max_rss 63 MB: replacing it between batches" in r.stderr


# GROW, whose second process (the first replacement) exits at once, before its first request
GROW_THEN_FAIL_ONCE = (
    "import sys\n"
    "from pathlib import Path\n"
    "starts = Path(sys.argv[1])\n"
    "n = len(list(starts.iterdir()))\n"
    "(starts / str(n)).touch()\n"
    "if n == 1:\n"
    "    sys.exit(3)\n"
) + GROW


def test_a_replacement_that_fails_to_start_after_a_recycle_is_restarted_not_fatal(pdir, tmp_path):
    """A worker "exited before its first request" stops its stage only when no process of that instance
    ever answered (a broken command). A worker replaced for max_rss had answered, so its
    replacement failing at start is an ordinary failure: restarted, nothing lost."""
    script, starts = tmp_path / "grow.py", tmp_path / "starts"
    script.write_text(GROW_THEN_FAIL_ONCE)
    starts.mkdir()
    pdir.write(f"""
        stages:
          - {{name: src, type: E, command: ["{{PY}}", "{{TW}}", count, "200"]}}
          - {{name: t, type: T, mode: batch, batch_size: 10, max_rss: 60MiB, prefetch: 1, {FAST_RESTART},
              command: ["{{PY}}", "{script}", "{starts}"]}}
          - {{name: sink, type: L, command: ["{{PY}}", "{{TW}}", append, out.txt]}}
    """)
    r = pdir.run("--once")
    assert r.code == 0, r.stderr
    assert sorted(pdir.lines("out.txt"), key=int) == [str(i) for i in range(200)]
    assert "replacing it between batches" in r.stderr
    assert len(list(starts.iterdir())) >= 3, r.stderr  # the first, the one that failed, the next


# A cyclic extractor (its own offsets, in sent.txt): the first process answers three requests
# with one message each and dies on the fourth; the second exits before it is asked anything;
# the third goes on from sent.txt to message 5, then answers empty.
CYCLES_THEN_FAIL_AT_START = """\
import os, sys
n = int(open("starts.txt").read()) if os.path.exists("starts.txt") else 0
open("starts.txt", "w").write(str(n + 1))
if n == 1:
    sys.exit(3)
sent = int(open("sent.txt").read()) if os.path.exists("sent.txt") else 0
for request in sys.stdin.buffer:
    if n == 0 and sent == 3:
        sys.exit(4)
    if sent < 6:
        sys.stdout.buffer.write(b"%d\\n" % sent)
        sent += 1
        open("sent.txt", "w").write(str(sent))
    sys.stdout.buffer.write(b"\\x00")
    sys.stdout.buffer.flush()
"""


def test_an_extractor_whose_replacement_dies_at_start_after_it_worked_is_restarted_not_fatal(pdir, tmp_path):
    """The extractor's side of the rule above: an instance that has answered requests is not
    a broken command when a later process of it exits before its first request."""
    script = tmp_path / "cycles.py"
    script.write_text(CYCLES_THEN_FAIL_AT_START)
    pdir.write(f"""
        stages:
          - {{name: src, type: E, mode: cyclic, poll_interval: 0.05, restart: {{max_restarts: 3, backoff: 0.05}},
              command: ["{{PY}}", "{script}"]}}
          - {{name: sink, type: L, command: ["{{PY}}", "{{TW}}", append, out.txt]}}
    """)
    r = pdir.run("--once")
    assert r.code == 0, r.stderr
    assert sorted(pdir.lines("out.txt"), key=int) == [str(i) for i in range(6)]
    assert (pdir.path / "starts.txt").read_text() == "3", r.stderr
    assert "exited before its first request" not in r.stderr


def test_deadletter_commands_take_the_pipeline_file_as_their_argument(pdir):
    pdir.write(three_stages('["{PY}", "{TW}", poison, "13"]', "on_failure: deadletter,"), name="other.yaml")
    ran = pdir.etlstage("run", "other.yaml", "--once", "--no-progress")
    assert ran.code == 0, ran.stderr
    # the log's hint, pasted as printed from where the run was started, works
    hint = re.search(r"\((etlstage deadletter show [^)]*)\)", ran.stderr)
    assert hint and hint[1] == "etlstage deadletter show other.yaml 1", ran.stderr
    pasted = pdir.etlstage(*shlex.split(hint[1])[1:])
    assert pasted.code == 0 and "  13" in pasted.stdout, pasted.stderr
    assert "stage 't' 1 message(s)" in pdir.etlstage("deadletter", "list", "other.yaml").stdout
    # the file first, as every subcommand takes it; the older order still works, with a note
    assert "  13" in pdir.etlstage("deadletter", "show", "other.yaml", "1").stdout
    old = pdir.etlstage("deadletter", "show", "1", "other.yaml")
    assert "  13" in old.stdout and "etlstage deadletter show other.yaml 1" in old.stderr, old.stderr
    nothing = pdir.etlstage("deadletter", "show", "other.yaml", "9")
    assert nothing.code == 2 and "(etlstage deadletter list other.yaml shows them)" in nothing.stderr
    r = pdir.etlstage("deadletter", "replay", "other.yaml", "1")
    assert r.code == 0 and "1 dead letter(s) will be sent again" in r.stdout, r.stderr
    missing = pdir.etlstage("deadletter", "replay", "other.yaml", "7")
    assert missing.code == 2 and "no dead letter(s) #7" in missing.stderr
    for args in (["list", "--help"], ["show", "--help"], ["replay", "--help"]):
        helped = pdir.etlstage("deadletter", *args)
        assert helped.code == 0 and len(helped.stdout.split("\n\n")[1].strip()) > 20, helped.stdout


def test_a_replacement_that_dies_at_start_after_its_instance_worked_is_restarted_not_fatal(pdir, tmp_path):
    """Replaced over max_rss, the instance's next process exits before its first request.
    The program has answered before, so this is a failure to restart, not a broken command
    that stops the stage at once; the third process loads the rest."""
    script = tmp_path / "second_start_fails.py"
    script.write_text(
        "import os, sys\n"
        "starts = 'starts.txt'\n"
        "n = int(open(starts).read()) if os.path.exists(starts) else 0\n"
        "open(starts, 'w').write(str(n + 1))\n"
        "if n == 1:\n"
        "    sys.exit(3)  # the replacement: gone before it is asked anything\n" + GROW
    )
    pdir.write(f"""
        stages:
          - {{name: src, type: E, command: ["{{PY}}", "{{TW}}", count, "200"]}}
          - {{name: t, type: T, mode: batch, batch_size: 10, max_rss: 60MiB, prefetch: 1,
              restart: {{max_restarts: 2, backoff: 0.05}}, command: ["{{PY}}", "{script}"]}}
          - {{name: sink, type: L, command: ["{{PY}}", "{{TW}}", append, out.txt]}}
    """)
    r = pdir.run("--once")
    assert r.code == 0, r.stderr
    assert sorted(pdir.lines("out.txt"), key=int) == [str(i) for i in range(200)]
    assert int((pdir.path / "starts.txt").read_text()) >= 3
    assert "exited before its first request" not in r.stderr


def test_a_replacement_that_dies_at_start_after_its_instance_crashed_is_restarted_not_fatal(pdir, tmp_path):
    """The instance's first process answers, then crashes; its replacement exits before its
    first request. The program has answered before, so this too is a failure to restart,
    not a broken command; the third process loads the rest."""
    script = tmp_path / "crash_then_fail_at_start.py"
    script.write_text(
        "import os, sys\n"
        "from etlstage.worker import run_transformer\n"
        "starts = 'starts.txt'\n"
        "n = int(open(starts).read()) if os.path.exists(starts) else 0\n"
        "open(starts, 'w').write(str(n + 1))\n"
        "if n == 1:\n"
        "    sys.exit(3)  # the replacement: gone before it is asked anything\n"
        "seen = []\n"
        "def f(ms):\n"
        "    seen.append(1)\n"
        "    if n == 0 and len(seen) == 4:\n"
        "        os._exit(1)  # the first process: a crash after three answered batches\n"
        "    return ms\n"
        "run_transformer(f)\n"
    )
    pdir.write(f"""
        stages:
          - {{name: src, type: E, command: ["{{PY}}", "{{TW}}", count, "200"]}}
          - {{name: t, type: T, mode: batch, batch_size: 10, prefetch: 1,
              restart: {{max_restarts: 2, backoff: 0.05}}, command: ["{{PY}}", "{script}"]}}
          - {{name: sink, type: L, command: ["{{PY}}", "{{TW}}", append, out.txt]}}
    """)
    r = pdir.run("--once")
    assert r.code == 0, r.stderr
    assert sorted(set(pdir.lines("out.txt")), key=int) == [str(i) for i in range(200)]
    assert int((pdir.path / "starts.txt").read_text()) == 3
    assert "exited before its first request" not in r.stderr


def test_new_work_answered_between_crashes_resets_failures_in_a_row(pdir, tmp_path):
    """The worker crashes once on each of messages 2, 5 and 8 (a transient fault), and between
    the crashes new work goes through. So none of them is "in a row" with the one before: each
    restart waits the first back-off, not a doubled one. Two things reset the count: an answer
    to new work, and the quiet check that confirms answers before a blamed job is sent again.
    Either one alone passes this test; it fails only when both are gone."""
    script = tmp_path / "crash_once_on.py"
    script.write_text(
        "import os\n"
        "from etlstage.worker import run_transformer\n"
        "def f(ms):\n"
        "    for m in ms:\n"
        "        flag = 'crashed-' + m.decode()\n"
        "        if m in (b'2', b'5', b'8') and not os.path.exists(flag):\n"
        "            open(flag, 'w').close()\n"
        "            os._exit(1)\n"
        "    return ms\n"
        "run_transformer(f)\n"
    )
    pdir.write(f"""
        stages:
          - {{name: src, type: E, command: ["{{PY}}", "{{TW}}", count, "12"]}}
          - {{name: t, type: T, mode: single, prefetch: 1, restart: {{max_restarts: 1, backoff: 0.1, backoff_max: 30}},
              command: ["{{PY}}", "{script}"]}}
          - {{name: sink, type: L, command: ["{{PY}}", "{{TW}}", append, out.txt]}}
    """)
    r = pdir.run("--once")
    assert r.code == 0, r.stderr
    assert sorted(set(pdir.lines("out.txt")), key=int) == [str(i) for i in range(12)]
    restarts = [line for line in r.stderr.splitlines() if "t failed (" in line]
    assert len(restarts) == 3, r.stderr
    assert all(line.endswith("in 0.1s") for line in restarts), restarts
