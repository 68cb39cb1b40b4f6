"""Each SDK's idempotent loader helper (FileSink) under the kill matrix: every key once.

The pipeline of ``tests/core/pipeline/test_crash.py``'s batch-id matrix (supervisor offsets,
one window at a time, the loader's batches closed by size or the window's end, so a window
extracted again re-forms the same batches with the same ids), with the loader replaced by
each SDK's example sink (``FileSink``: a batch is a file named after its id, written, synced
and renamed before it is acknowledged).  The supervisor, the Python E and T and the sink are
SIGKILLed at seeded moments, KILLS times: no key is lost and none is loaded twice.  Random
kills rarely land between a loader's commit and the window's, so a second test aims one
there: the supervisor is killed while the sink's acknowledgement of a committed batch is
held back (``tests/fixtures/hold_ack.py``), and the next run's sink must skip it by its id.
"""

from __future__ import annotations

import collections
import json
import sys
from pathlib import Path

import pytest

from etlstage.worker.idempotent import FileSink
from tests.core.pipeline.test_crash import (
    KILLS,
    SEED,
    assert_every_key_once,
    crash_run,
    kill_the_supervisor_then_run_again,
    ledger_pipeline,
)
from tests.sdk.conftest import SDK
from tests.support.paths import FIXTURES

pytestmark = pytest.mark.slow  # a kill matrix: 10-30 s each


def sink_command(language: str, request: pytest.FixtureRequest) -> tuple[list[str], str]:
    """The SDK's example sink writing into ``out``, and a word of its command line to aim at."""
    if language == "node":
        return ["node", str(SDK / "node/examples/sink.js"), "out"], "sink.js"
    if language == "go":
        go = request.getfixturevalue("go_examples")
        return [str(go / "sink"), "out"], str(go / "sink")
    if language == "rust":
        rust = request.getfixturevalue("rust_examples")
        return [str(rust / "sink"), "out"], str(rust / "sink")
    classes = request.getfixturevalue("java_classes")
    return ["java", "-cp", str(classes), "org.etlstage.examples.Sink", "out"], "org.etlstage.examples.Sink"


@pytest.mark.parametrize("language", ["node", "go", "rust", "java"])
def test_every_key_once_through_the_sdks_file_sink_when_any_process_dies(language, pdir, request):
    command, aim = sink_command(language, request)
    python_ledger = '["{PY}", "{TW}", ledger, out]'
    text = ledger_pipeline(linger=60)
    assert python_ledger in text
    pdir.write(text.replace(python_ledger, json.dumps(command)))
    seed = SEED + 13 + len(language)
    kills, _ = crash_run(pdir, seed, victims=("tw.py", aim))
    assert kills >= KILLS
    out = Path(pdir.path) / "out"
    assert_every_key_once(collections.Counter(m.decode() for m in FileSink(out).lines()), seed)


@pytest.mark.parametrize("language", ["node", "go", "rust", "java"])
def test_a_batch_committed_when_the_supervisor_died_is_skipped_by_the_sdks_file_sink(language, pdir, request):
    command, _ = sink_command(language, request)
    flag = Path(pdir.path) / "committed.flag"
    held = [sys.executable, str(FIXTURES / "hold_ack.py"), str(flag), "5", *command]
    pdir.write(ledger_pipeline(linger=60).replace('["{PY}", "{TW}", ledger, out]', json.dumps(held)))
    kill_the_supervisor_then_run_again(pdir, flag)
    assert_every_key_once(collections.Counter(m.decode() for m in FileSink(Path(pdir.path) / "out").lines()), None)
