"""check-worker: the modes a worker supports, its own name in reports, UTF-8 kept as UTF-8."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from etlstage.testing.harness import worker_name
from etlstage.worker import Transformer
from tests.support.paths import ROOT
from tests.support.run_cli import Run, etlstage

SINGLE_ONLY = [sys.executable, "tests/fixtures/single_only.py"]


def check_worker(*args: str) -> Run:
    return etlstage(ROOT, "check-worker", *args, timeout=300)


def test_a_worker_refusing_a_mode_gets_a_note_naming_the_mode_and_the_flag():
    r = check_worker("--type", "T", "--", *SINGLE_ONLY)
    assert r.code == 1
    assert "6 passed, 2 failed" in r.stdout
    assert (
        "note: every batch check failed before the worker answered its first request: the worker may not "
        "support batch mode. If it is not meant to, check only the modes it supports: "
        f"etlstage check-worker --type T --mode single -- {' '.join(SINGLE_ONLY)}"  # pasteable as printed
    ) in r.stdout


def test_the_modes_given_are_the_modes_checked():
    r = check_worker("--type", "T", "--mode", "single", "--", *SINGLE_ONLY)
    assert r.code == 0, r.stdout
    assert "batch" not in r.stdout and "note:" not in r.stdout
    r = check_worker(
        "--type", "T", "--mode", "single", "--mode", "batch", "--batch-driver", "supervisor", "--", *SINGLE_ONLY
    )
    assert r.code == 1
    # a check every mode runs is told apart by its mode
    assert "PASS  single: empty messages" in r.stdout and "FAIL  batch: empty messages" in r.stdout
    assert "may not support batch mode" in r.stdout and f"--mode single -- {' '.join(SINGLE_ONLY)}" in r.stdout


def test_a_crash_in_every_mode_is_not_blamed_on_the_modes():
    r = check_worker("--type", "T", "--", sys.executable, "-c", "import sys; sys.exit(3)")
    assert r.code == 1
    assert "note: the worker failed before answering its first request in every mode" in r.stdout
    assert "may not support" not in r.stdout


def test_reports_name_the_worker_not_the_harness():
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
    assert "protocol violation by broken_bnc.py: BNC after message 3" in r.stdout
    assert "stage: broken_bnc.py (T-stage" in r.stdout
    assert "harness" not in r.stdout


@pytest.mark.parametrize(
    "argv, name",
    [
        (["node", "shout.js"], "shout.js"),
        (["/usr/bin/python3", "-u", "/opt/w/enrich.py", "--x"], "enrich.py"),
        (["python3", "-m", "pkg.worker"], "pkg.worker"),
        (["./bin/upper", "-v"], "upper"),
        (["perl"], "perl"),
    ],
)
def test_worker_names(argv: list[str], name: str):
    assert worker_name(argv) == name


def test_an_in_process_worker_is_named_by_its_class():
    class Shout(Transformer):
        def process(self, message: bytes) -> list[bytes]:
            return [message.upper()]

    assert worker_name(Shout()) == "Shout"


def _shout_js() -> str:
    text = (ROOT / "docs" / "getting-started.md").read_text()
    return re.search(r"```js\n(.*?)```", text, re.S).group(1)


def test_a_worker_that_garbles_non_ascii_fails(tmp_path: Path):
    # the getting-started worker with its messages decoded as Latin-1 (its results are encoded as UTF-8)
    garbling = _shout_js().replace("toString('utf8')", "toString('latin1')")
    assert "latin1" in garbling
    (tmp_path / "shout.js").write_text(garbling)
    (tmp_path / "sdk").symlink_to(ROOT / "sdk")  # saved in the checkout's folder, as the page says
    r = check_worker("--type", "T", "--mode", "single", "--", "node", str(tmp_path / "shout.js"))
    assert r.code == 1
    assert "FAIL  non-ASCII UTF-8 messages come back as UTF-8" in r.stdout
    assert "'CAFÃ© CRÃ¨ME' is UTF-8 encoded twice ('CAFé CRèME' read as latin-1)" in r.stdout


def test_a_stage_is_checked_as_its_pipeline_declares_it(tmp_path: Path):
    # the pipeline's folder is where the worker starts: its command names a file there
    (tmp_path / "only.py").write_text((ROOT / "tests/fixtures/single_only.py").read_text())
    (tmp_path / "stages.yaml").write_text(
        "stages:\n"
        "  - {name: src, type: E, command: [x]}\n"
        f"  - {{name: shout, type: T, mode: single, command: ['{sys.executable}', only.py]}}\n"
        "  - {name: up, type: T, mode: batch, batch_size: 2, batch_driver: worker,"
        f" command: ['{sys.executable}', '{ROOT / 'workers/examples/upper.py'}']}}\n"
        "  - {name: sink, type: L, command: [cat]}\n"
    )
    pipeline = str(tmp_path / "stages.yaml")
    r = check_worker("--stage", "shout", "--pipeline", pipeline)
    assert r.code == 0, r.stdout + r.stderr
    assert "6 passed, 0 failed" in r.stdout and "batch" not in r.stdout
    r = check_worker("--stage", "up", "--pipeline", pipeline)
    assert r.code == 0, r.stdout + r.stderr
    assert (
        "PASS  batch, worker-driven (size 2)" in r.stdout and "single" not in r.stdout and "supervisor" not in r.stdout
    )
    r = check_worker("--stage", "nope", "--pipeline", pipeline)
    assert r.code == 2 and "no stage 'nope'; its stages are src, shout, up, sink" in r.stderr
    r = check_worker("--stage", "shout", "--pipeline", pipeline, "--", "cat")
    assert r.code == 2 and "give no COMMAND or --type" in r.stderr
    r = check_worker("--type", "T")
    assert r.code == 2 and "give --type and the worker's COMMAND after --, or --stage NAME" in r.stderr
