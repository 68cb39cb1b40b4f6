"""Kinesis -> pass-through T -> idempotent file L under `etlstage run --once`, with the
supervisor killed (SIGKILL) several times: every record arrives, exactly once."""

from __future__ import annotations

import json
import random
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.support.run_cli import RUN_ONCE


@pytest.mark.slow  # over 10 s
def test_every_kinesis_record_arrives_despite_supervisor_kills(pdir):
    records = [json.dumps({"id": i, "body": "x" * (i % 50)}, separators=(",", ":")) for i in range(600)]
    (pdir.path / "records.jsonl").write_text("\n".join(records) + "\n")
    pdir.write("""
        services:
          - name: kinesis
            command: ["{PY}", -m, etlstage_workers.kinesis.emulator, --service, --stream, s, --shards, "3",
                      --records, records.jsonl, --partition-key, /id]
        stages:
          - {name: read, type: E, mode: cyclic, command: [etlstage-kinesis, --stream, s, --limit, "20"]}
          - {name: pass, type: T, mode: batch, batch_size: 100, command: ["{PY}", "{TW}", slow, "0.3", t-busy]}
          - {name: sink, type: L, mode: batch, batch_size: 150, command: ["{PY}", "{TW}", idem, out.txt]}
    """)
    rng = random.Random(5)
    cmd = RUN_ONCE
    out, busy = pdir.path / "out.txt", pdir.path / "t-busy"
    at_kill: list[tuple[int, int, bool]] = []  # sink at start, sink at the kill, records inside the T then
    with open(pdir.path / "log.txt", "ab") as log:
        while len(at_kill) < 5:
            before = _loaded(out)
            proc = subprocess.Popen(cmd, cwd=pdir.path, stdout=log, stderr=log)
            deadline = time.monotonic() + 60
            # The emulator takes ~1-2 s to start and seed: kill only once records flow (the sink
            # has grown in this run), at a moment a window is inside the T, on its way to the sink.
            while _loaded(out) <= before and proc.poll() is None and time.monotonic() < deadline:
                time.sleep(0.02)
            while not busy.exists() and proc.poll() is None and time.monotonic() < deadline:
                time.sleep(0.01)
            time.sleep(rng.uniform(0.0, 0.2))  # somewhere in the T's 0.3 s
            if proc.poll() is not None or _loaded(out) >= len(records):
                proc.wait(timeout=300)  # one run at a time: it ends before the final one starts
                break  # the run is ending: a kill now would cut nothing
            in_flight = busy.exists()
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            at_kill.append((before, _loaded(out), in_flight))
            busy.unlink(missing_ok=True)  # the T is killed with the supervisor (its stdin closes)
        final = subprocess.run(cmd, cwd=pdir.path, stdout=log, stderr=log, timeout=300)
    assert len(at_kill) >= 3, f"the pipeline finished before it was killed three times: {at_kill}"
    # every kill cut a flowing pipeline: records had reached the sink in that run, not all of them,
    # and a window was between the extractor and the sink
    assert all(before < killed < len(records) and in_flight for before, killed, in_flight in at_kill), at_kill
    assert final.returncode == 0, (pdir.path / "log.txt").read_text()[-3000:]
    got = pdir.lines("out.txt")
    assert len(got) == len(set(got)) == len(records)
    assert set(got) == set(records)


def _loaded(path: Path) -> int:
    """Records the idempotent sink holds (complete lines)."""
    return path.read_bytes().count(b"\n") if path.exists() else 0
