"""The RDSS transformer on the Spark engine's executors, its sequences spread over
micro-batches: ``partition_by`` keeps every part of a sequence on one partition (and its
sequence store), so reassembly, time-outs (GENERR009) and copies after completion come out
exactly as on the supervisor engine, which runs the same file on the same input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from etlstage.protocol.partition import partition_key, partition_of
from etlstage.protocol.pointer import parse_pointer
from tests.conftest import PY, TW
from tests.stock.rdss.conftest import compact, fresh, split_message
from tests.support.paths import FIXTURES
from tests.support.run_cli import etlstage

pytestmark = [pytest.mark.slow, pytest.mark.timeout(400)]
SEQUENCE = "/messageHeader/messageSequence/sequence"
PAUSE_AT, TIMEOUT_S = 10, 2


def partition(part: bytes) -> int:
    return partition_of(partition_key(part, parse_pointer(SEQUENCE)), 2)


def stream() -> list[bytes]:
    """Lines for the extractor, 5 per cycle."""
    done = split_message(fresh(), 4)  # complete over two cycles, then a copy of a part
    lost = split_message(fresh(), 3)  # parts 1 and 3 only: times out
    while True:  # a later sequence on the same partition as the incomplete one wakes its store
        later = split_message(fresh(), 2)
        if partition(later[0]) == partition(lost[0]):
            break
    singles = [compact(fresh()) for _ in range(12)]
    lines = [
        lost[0], singles[0], singles[1], singles[2], singles[3],
        lost[2], singles[4], singles[5], singles[6], singles[7],
        # --- PAUSE_AT: the extractor waits longer than the sequence timeout here ---
        later[1], done[2], done[0], singles[8], singles[9],
        later[0], done[3], done[1], singles[10], singles[11],
        done[1],  # a copy of a part after its sequence completed
    ]  # fmt: skip
    return lines


def pipeline(data: Path, out: Path) -> str:
    return f"""
stages:
  - {{name: src, type: E, mode: cyclic, command: [{PY}, {FIXTURES / "lines.py"}, {data}, "5",
      --pause-before, "{PAUSE_AT}", "{TIMEOUT_S + 2}"]}}
  - {{name: rdss, type: T, mode: batch, batch_size: 50, instances: 2, partition_by: {SEQUENCE},
      command: [etlstage-rdss, run, --spec, "3.0.2", --sequence-timeout, "{TIMEOUT_S}"]}}
  - {{name: load, type: L, command: [{PY}, {TW}, append, {out}]}}
"""


def results(out: Path) -> list[tuple[str, str | None, int | None]]:
    rows = []
    for line in out.read_text().splitlines():
        h = json.loads(line)["messageHeader"]
        seq = h.get("messageSequence") or {}
        rows.append((h["messageId"], h.get("errorCode"), seq.get("total")))
    return sorted(rows, key=lambda r: (r[0], r[1] or "", r[2] or 0))


def test_sequences_over_micro_batches_come_out_as_under_the_supervisor(tmp_path: Path) -> None:
    lines = stream()
    data = tmp_path / "in.jsonl"
    data.write_bytes(b"\n".join(lines) + b"\n")
    got = {}
    for engine in ("supervisor", "spark"):
        work = tmp_path / engine
        work.mkdir()
        (work / "stages.yaml").write_text(pipeline(data, work / "out.jsonl"))
        flags = ["--engine", "spark", "--master", "local[2]"] if engine == "spark" else []
        r = etlstage(work, "run", *flags, "--once", "--no-progress", "stages.yaml", timeout=300)
        assert r.code == 0, r.stderr[-3000:]
        got[engine] = results(work / "out.jsonl")
    assert got["spark"] == got["supervisor"]
    codes = [code for _, code, _ in got["spark"]]
    assert codes.count("GENERR009") == 2  # the two parts of the incomplete sequence
    whole = {r[0] for r in got["spark"] if r[1] is None and r[2] == 1}
    assert len(whole) == 14  # twelve single messages and the two reassembled sequences
