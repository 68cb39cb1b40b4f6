"""Workers on the Rust and Java SDKs in one pipeline, each mode of the conversation on
the way, end to end on both engines with the exact output."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.engines import ENGINES, Engine

SDK = Path(__file__).resolve().parents[2] / "sdk"
RUST = SDK / "rust" / "target" / "release" / "examples"  # built by the rust_examples fixture
JAVA_CLASSES = SDK / "java" / "target" / "classes"  # by java_classes

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

# records 0..99 in cycles of 25 (Rust, worker-managed offsets) -> upper case in batches
# the worker drives (Java, BNC) -> upper case again, one message a request (Rust) ->
# loaded in batches closed by EOB, each committed by its id: one file a batch (Java)
STAGES = """
name: rust-java
stages:
  - name: numbers
    type: E
    mode: cyclic
    offsets: worker
    command: ["{RUST}/counter", "25", "100"]
  - name: upper
    type: T
    mode: batch
    batch_size: 7
    batch_driver: worker
    command: ["java", "-cp", "{JAVA}", "org.etlstage.examples.Upper"]
  - name: again
    type: T
    mode: single
    command: ["{RUST}/upper"]
  - name: sink
    type: L
    mode: batch
    batch_size: 20
    batch_id: true
    command: ["java", "-cp", "{JAVA}", "org.etlstage.examples.Sink", "output"]
"""


@pytest.fixture(params=ENGINES)
def engine(request: pytest.FixtureRequest, tmp_path: Path, rust_examples: Path, java_classes: Path) -> Engine:
    return Engine(request.param, request, tmp_path)


def test_rust_and_java_workers_load_every_record_once(engine: Engine) -> None:
    code, log = engine.run(STAGES.replace("{RUST}", str(RUST)).replace("{JAVA}", str(JAVA_CLASSES)))
    assert code == 0, log[-3000:]
    lines = engine.batch_lines("output")
    assert sorted(lines, key=lambda s: int(s.split()[1])) == [f"RECORD {n}" for n in range(100)], log[-3000:]
    # the extractor committed its offset at the start of each later cycle: all 100 records
    state = engine.tmp / ".etlstage" / "rust-java" / "stages" / "numbers"
    assert (state / "offset-0").read_text() == "100"
