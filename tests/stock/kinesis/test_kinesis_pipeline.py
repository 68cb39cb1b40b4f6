"""Kinesis -> pass-through T -> idempotent file L under `etlstage run --once`, with the
supervisor killed (SIGKILL) several times: every record arrives, exactly once."""

from __future__ import annotations

import json
import random
import signal
import subprocess
import time

from tests.support.run_cli import RUN_ONCE


def test_every_kinesis_record_arrives_despite_supervisor_kills(pdir):
    records = [json.dumps({"id": i, "body": "x" * (i % 50)}, separators=(",", ":")) for i in range(3000)]
    (pdir.path / "records.jsonl").write_text("\n".join(records) + "\n")
    pdir.write("""
        services:
          - name: kinesis
            command: ["{PY}", -m, etlstage_workers.kinesis.emulator, --service, --stream, s, --shards, "3",
                      --records, records.jsonl, --partition-key, /id]
        stages:
          - {name: read, type: E, mode: cyclic, command: [etlstage-kinesis, --stream, s, --limit, "10"]}
          - {name: pass, type: T, mode: batch, batch_size: 100, command: ["{PY}", "{TW}", pass]}
          - {name: sink, type: L, mode: batch, batch_size: 150, command: ["{PY}", "{TW}", idem, out.txt]}
    """)
    rng = random.Random(5)
    cmd = RUN_ONCE
    kills = 0
    with open(pdir.path / "log.txt", "ab") as log:
        while kills < 5:
            proc = subprocess.Popen(cmd, cwd=pdir.path, stdout=log, stderr=log)
            time.sleep(rng.uniform(1.0, 3.0))  # the emulator takes ~2 s to start and seed
            if proc.poll() is not None:
                break
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            kills += 1
        final = subprocess.run(cmd, cwd=pdir.path, stdout=log, stderr=log, timeout=300)
    assert kills == 5, "the pipeline finished before it was killed five times"
    assert final.returncode == 0, (pdir.path / "log.txt").read_text()[-3000:]
    got = pdir.lines("out.txt")
    assert len(got) == len(set(got)) == len(records)
    assert set(got) == set(records)
