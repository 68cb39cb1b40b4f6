"""The in-memory harness and the conformance checker, over both transports."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from etlstage.protocol import Markers
from etlstage.testing import StageHarness, WorkerFailed
from etlstage.testing.conformance import Options, report, run_checks
from etlstage.worker import Extractor, Transformer
from tests.support.paths import FIXTURES, ROOT
from tests.support.run_cli import Run, etlstage

EXAMPLES = ROOT / "workers" / "examples"
TESTW = FIXTURES


class Upper(Transformer):
    def process(self, messages):
        return [m.upper() for m in messages]


UPPER_ARGV = [sys.executable, str(EXAMPLES / "upper.py")]
T_CHECKS = [
    "single: EOP after every request, nothing unasked on stdout",
    "batch, supervisor-driven (size 3): EOP per EOB-closed batch, partial last",
    "batch, worker-driven (size 3): BNC exactly when due, partial batch closed by EOB",
    "empty messages",
    "non-ASCII UTF-8 messages come back as UTF-8 (é, ü, 日本語, 🙂)",
    "printable markers | # ~ ^ read from ETLSTAGE_*",
    "control-byte markers 1e 03 04 05 read from ETLSTAGE_*",
    "stdin closed at once: exit 0, nothing written",
]
E_CHECKS = [
    "plain run: messages, then exit 0",
    "cyclic: one EOP per request, clean exit on stdin EOF",
    "cyclic: printable markers from ETLSTAGE_*",
]

SCENARIOS = [
    dict(mode="single"),
    dict(mode="batch", batch_size=3),
    dict(mode="batch", batch_size=3, batch_driver="worker"),
    dict(mode="batch", batch_size=2, markers=Markers(eom=ord("|"), eop=ord("#"), eob=ord("~"), bnc=ord("^"))),
]


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: "-".join(str(v) for v in s.values()))
def test_same_results_in_process_and_as_a_subprocess(stage_harness, scenario):
    inputs = [b"a", b"b", b"", b"d", b"e"]
    in_process = stage_harness.run(Upper(), type="T", inputs=inputs, **scenario)
    subprocess_ = stage_harness.run(UPPER_ARGV, type="T", inputs=inputs, **scenario)
    assert in_process.batches == subprocess_.batches
    assert in_process.outputs == [b"A", b"B", b"", b"D", b"E"]
    size = scenario.get("batch_size", 1)
    assert [len(b) for b in in_process.inputs] == [min(size, 5 - i) for i in range(0, 5, size)]
    assert subprocess_.exit_status == 0


def test_extractor_cycles_with_supervisor_offsets(stage_harness):
    class Range(Extractor):
        def extract(self, request):
            return [str(i).encode() for i in range(request.start, request.end)]

    r = stage_harness.run(
        Range(),
        type="E",
        mode="cyclic",
        offsets="supervisor",
        requests=[{"start": 0, "end": 3}, {"start": 3, "end": 3}, {"start": 3, "end": 5}],
    )
    assert r.batches == [[b"0", b"1", b"2"], [], [b"3", b"4"]]


def test_a_violation_fails_with_the_supervisors_message(stage_harness):
    with pytest.raises(WorkerFailed) as err:
        stage_harness.run(
            [sys.executable, str(TESTW / "broken_bnc.py")],
            type="T",
            mode="batch",
            batch_driver="worker",
            batch_size=2,
            inputs=[b"a", b"b"],
        )
    text = str(err.value)
    assert "BNC after message 2 of a batch of 2 — that message filled the batch" in text
    assert "command: [" in text and "pid: " in text


def test_stderr_is_returned(stage_harness):
    def noisy(messages):
        print("log line from the worker")
        return messages

    r = stage_harness.run(noisy, type="T", inputs=[b"x"])
    assert "log line from the worker" in r.stderr


@pytest.mark.parametrize("worker", ["in-process", "subprocess"])
def test_conformance_suite_passes_for_a_correct_worker_on_both_transports(worker, tmp_path):
    w = Upper() if worker == "in-process" else UPPER_ARGV
    results = run_checks(w, Options(type="T"), StageHarness(str(tmp_path)))
    assert [r.passed for r in results] == [True] * 8, report(results)
    assert [r.name for r in results] == T_CHECKS


def test_conformance_suite_for_an_extractor(tmp_path):
    argv = [sys.executable, str(EXAMPLES / "count.py"), "10", "--per-cycle", "3"]
    results = run_checks(argv, Options(type="E"), StageHarness(str(tmp_path)))
    assert [(r.name, r.passed) for r in results] == [(name, True) for name in E_CHECKS], report(results)


def test_conformance_suite_fails_an_extractor_that_exits_non_zero(tmp_path):
    argv = [sys.executable, "-c", "import sys; sys.stdout.write('x\\n'); sys.exit(3)"]
    results = run_checks(argv, Options(type="E"), StageHarness(str(tmp_path)))
    assert [r.name for r in results] == E_CHECKS
    assert not any(r.passed for r in results), report(results)


def check_worker(*args: str) -> Run:
    return etlstage(ROOT, "check-worker", *args, timeout=300)


@pytest.mark.parametrize("argv", [["node", "workers/examples/upper.js"], [sys.executable, "workers/examples/upper.py"]])
def test_check_worker_cli_passes_example_workers(argv):
    r = check_worker("--type", "T", "--", *argv)
    assert r.code == 0, r.stdout + r.stderr
    assert "8 passed, 0 failed" in r.stdout


def test_check_worker_cli_passes_the_c_worker(c_build):
    r = check_worker("--type", "T", "--", str(Path(c_build) / "upper"))
    assert r.code == 0, r.stdout + r.stderr
    assert "8 passed, 0 failed" in r.stdout


def test_check_worker_says_exactly_what_is_wrong_with_a_late_bnc():
    r = check_worker(
        "--type",
        "T",
        "--mode",
        "batch",
        "--batch-driver",
        "worker",
        "--",
        sys.executable,
        "tests/fixtures/broken_bnc.py",
    )
    assert r.code == 1
    assert "FAIL  batch, worker-driven (size 3)" in r.stdout
    assert "BNC after message 3 of a batch of 3 — that message filled the batch" in r.stdout


def test_check_worker_catches_a_stray_print():
    # --timeout 3: two checks (printable and control-byte markers) wait for it: awk splits on newlines only
    r = check_worker("--type", "T", "--mode", "single", "--timeout", "3", "--", "sh", "tests/fixtures/stray_print.sh")
    assert r.code == 1
    assert "the worker wrote bytes with no request outstanding" in r.stdout
    assert "hello from stray_print.sh" in r.stdout


def test_check_worker_rejects_bad_options():
    r = check_worker("--type", "E", "--mode", "batch", "--", "true")
    assert r.code == 2 and "not a mode of a E-stage" in r.stderr


@pytest.mark.filterwarnings("error::pytest.PytestUnhandledThreadExceptionWarning")  # it ends without an error
def test_an_in_process_worker_that_fails_has_its_pipes_cut_so_its_thread_ends(stage_harness, caplog):
    """A worker run in a thread cannot be killed: when it fails (here, too slow) the harness
    cuts its pipes, so the thread ends at its next read or write rather than waiting for
    input for ever (one thread and two pipes left behind by every failing unit test), and
    it ends quietly though the harness's event loop is gone by then."""
    import threading
    import time

    threads: list[threading.Thread] = []

    class Slow(Transformer):
        def process(self, messages):
            threads.append(threading.current_thread())
            time.sleep(0.5)
            return messages

    with pytest.raises(WorkerFailed):
        stage_harness.run(Slow(), type="T", inputs=[b"a", b"b"], timeout=0.2)
    assert len(threads) == 1 and threads[0] is not threading.main_thread()
    deadline = time.monotonic() + 10
    while threads[0].is_alive():
        assert time.monotonic() < deadline, "the failed worker's thread still runs"
        time.sleep(0.05)
    assert "worker raised" not in caplog.text  # the harness cut its pipes: not an error of the worker
