"""check-worker on a loader given batch ids: a batch sent again with its id (as after a
crash) must be acknowledged and loaded once, and a new batch loaded."""

from __future__ import annotations

import sys
from pathlib import Path

from etlstage.testing.conformance import Options, Partial, check_resent_batch, report, run_checks
from etlstage.testing.harness import StageHarness
from etlstage.worker import Loader
from etlstage.worker.idempotent import FileSink
from tests.support.paths import ROOT
from tests.support.run_cli import etlstage

BATCHES = [sys.executable, str(ROOT / "workers/examples/batches.py")]
NAIVE = [sys.executable, str(ROOT / "tests/fixtures/naive_loaders.py")]


class Files(Loader):
    """Idempotent: one file per batch id, and says where."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def setup(self) -> None:
        self.sink = FileSink(self.folder)

    def load(self, messages: list[bytes]) -> None:
        self.sink.commit(self.batch_id, messages)

    def report(self) -> dict[str, object]:
        return {"output": str(self.folder)}


class Appends(Loader):
    """Naive: appends every batch it is given, the id ignored."""

    def __init__(self, path: Path, output: str | None = None) -> None:
        self.path, self.output = path, output

    def load(self, messages: list[bytes]) -> None:
        with open(self.path, "ab") as f:
            f.write(b"".join(m + b"\n" for m in messages))

    def report(self) -> dict[str, object]:
        return {"output": self.output or str(self.path)}


class SkipsAfterTheFirst(Files):
    """Wrong the other way: takes any batch after its first for one sent again."""

    def load(self, messages: list[bytes]) -> None:
        if not any(self.folder.iterdir()):
            super().load(messages)


def resent(worker: object, tmp_path: Path) -> str | Partial | None:
    return check_resent_batch(StageHarness(str(tmp_path / "h")), worker, Options(type="L", batch_id=True))


def test_an_idempotent_loader_passes_every_check_with_batch_ids(tmp_path):
    results = run_checks(Files(tmp_path / "out"), Options(type="L", batch_id=True), StageHarness(str(tmp_path)))
    assert [r.detail for r in results if not r.passed or r.partial] == []
    assert {r.mode for r in results} == {"batch"}  # ids come only in supervisor-driven batches
    assert results[-1].name.startswith("batch ids: a batch sent again with its id")


def test_an_appending_loader_fails_saying_the_batch_sent_again_was_loaded_again(tmp_path):
    problem = resent(Appends(tmp_path / "out.txt"), tmp_path)
    assert isinstance(problem, str)
    assert "the same batch sent again with its id (as to a loader restarted after a crash) was loaded again" in problem
    assert "went from 3 line(s), 12 byte(s) to 6 line(s), 24 byte(s)" in problem  # alpha, beta, '' twice
    assert "Commit the batch id with the data" in problem


def test_a_loader_skipping_a_new_batch_fails(tmp_path):
    problem = resent(SkipsAfterTheFirst(tmp_path / "out"), tmp_path)
    assert problem == (
        "a new batch (another id) was acknowledged but not loaded "
        f"({tmp_path / 'out'}: 1 file(s), 3 line(s), unchanged): skip only ids committed"
    )


def test_without_an_output_to_measure_the_check_passes_partly_and_says_so(tmp_path):
    problem = resent(Appends(tmp_path / "out.txt", output="warehouse.orders"), tmp_path)
    assert isinstance(problem, Partial)
    assert "reports its output as 'warehouse.orders', no output that is a file or folder here" in problem.note
    results = run_checks(
        Appends(tmp_path / "out.txt", output="warehouse.orders"),
        Options(type="L", batch_id=True),
        StageHarness(str(tmp_path)),
    )
    assert results[-1].passed and results[-1].partial
    assert "7 passed (1 partly), 0 failed" in report(results, "L")
    assert "      partly checked: the loader acknowledged each batch" in report(results, "L")


def test_the_batch_is_sent_again_to_a_new_process_as_after_a_crash(tmp_path):
    # ids kept in memory only: the restarted process loads the batch again
    r = etlstage(tmp_path, "check-worker", "--type", "L", "--batch-id", "--", *NAIVE, "remember", "out.txt")
    assert r.code == 1
    assert "FAIL  batch ids: a batch sent again with its id" in r.stdout
    assert "was loaded again: out.txt went from " in r.stdout


def test_check_worker_batch_id_passes_the_example_and_fails_a_naive_appender(tmp_path):
    r = etlstage(tmp_path, "check-worker", "--type", "L", "--batch-id", "--", *BATCHES, "out")
    assert r.code == 0, r.stdout
    assert "PASS  batch ids: a batch sent again with its id" in r.stdout and "partly" not in r.stdout
    r = etlstage(tmp_path, "check-worker", "--type", "L", "--batch-id", "--", *NAIVE, "append", "naive.txt")
    assert r.code == 1
    assert "was loaded again: naive.txt went from" in r.stdout


def test_the_append_example_appends_each_batch_once_with_batch_ids(tmp_path):
    """workers/examples/append.py: with ids, one file and a journal beside it (AppendSink)."""
    append = [sys.executable, str(ROOT / "workers/examples/append.py")]
    r = etlstage(tmp_path, "check-worker", "--type", "L", "--batch-id", "--", *append, "lines.txt")
    assert r.code == 0, r.stdout
    assert "PASS  batch ids: a batch sent again with its id" in r.stdout and "partly" not in r.stdout


def test_a_stage_with_batch_id_true_is_checked_with_batch_ids(tmp_path):
    (tmp_path / "stages.yaml").write_text(
        "name: p\nstages:\n"
        "  - {name: src, type: E, command: [echo]}\n"
        "  - {name: sink, type: L, mode: batch, batch_id: true, command: "
        f"[{sys.executable}, {ROOT / 'workers/examples/batches.py'}, out]}}\n"
    )
    r = etlstage(tmp_path, "check-worker", "--stage", "sink")
    assert r.code == 0, r.stdout + r.stderr
    assert "with batch ids" in r.stdout and "PASS  batch ids: a batch sent again" in r.stdout
    assert (tmp_path / "out").is_dir()  # started in the pipeline's folder


def test_batch_id_is_refused_where_no_stage_could_have_ids(tmp_path):
    for args in (["--type", "T"], ["--type", "L", "--mode", "single"], ["--type", "L", "--batch-driver", "worker"]):
        r = etlstage(tmp_path, "check-worker", *args, "--batch-id", "--", *BATCHES, "out")
        assert r.code != 0 and "--batch-id: batch ids are for L-workers in batch mode" in r.stderr, args


def test_checking_a_loader_again_sends_it_batches_it_has_not_committed(tmp_path):
    # the loader keeps its output between check runs: each run's ids must be new to it
    loader = Files(tmp_path / "out")
    assert resent(loader, tmp_path / "first") is None
    assert resent(loader, tmp_path / "again") is None
