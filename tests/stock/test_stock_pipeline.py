"""The repository's stages.yaml, end to end on embedded defaults: Kinesis emulator ->
RDSS transformer -> Spark loader, 5,000 generated RDSS records with every kind of bad
input; the Parquet tables must hold exactly the expected messages."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pyarrow.dataset as ds

from tests.support.run_cli import RUN_ONCE, etlstage

ROOT = Path(__file__).resolve().parents[2]


def tables(out: Path) -> dict[str, list[tuple[str, str | None]]]:
    got = {}
    for table in ("valid", "invalid", "error"):
        path = out / table
        rows = (
            ds.dataset(str(path), format="parquet").to_table(columns=["messageId", "errorCode"]).to_pylist()
            if path.exists()
            else []
        )
        got[table] = sorted((r["messageId"], r["errorCode"]) for r in rows)
    return got


def _summary_counts(stderr: str, stage: str) -> dict:
    """``rdss: messages 5,000, errors (GENERR001 54 ...), ...`` from the run summary."""
    import re

    line = next(x for x in stderr.splitlines() if x.startswith(f"{stage}: "))
    out: dict = {}
    for name, inner, number in re.findall(r"([a-z ]+?) (?:\(([^)]*)\)|([\d,]+))(?:, |$)", line[len(stage) + 2 :]):
        if inner:
            pairs = inner.split()
            out[name] = {pairs[i]: int(pairs[i + 1].replace(",", "")) for i in range(0, len(pairs), 2)}
        else:
            out[name] = int(number.replace(",", ""))
    return out


def test_stock_pipeline_loads_exactly_the_expected_tables(tmp_path):
    shutil.copy(ROOT / "stages.yaml", tmp_path / "stages.yaml")
    run = etlstage(tmp_path, *RUN_ONCE[3:], timeout=900)
    assert run.code == 0, run.stderr[-5000:]
    expected = json.loads((tmp_path / ".etlstage/demo/expected.json").read_text())
    assert expected["counts"]["records"] >= 5000
    want: dict[str, list[tuple[str, str | None]]] = {"valid": [], "invalid": [], "error": []}
    for message_id, fate in expected["messages"].items():
        want[fate["table"]].append((message_id, fate["errorCode"]))
    got = tables(tmp_path / "output/rdss")
    for table in want:
        assert got[table] == sorted(want[table]), table  # exactly these ids, codes, no duplicates
    assert "extracted 5,000 messages" in run.stderr
    # the summary accounts for every message at each stage
    rdss = _summary_counts(run.stderr, "rdss")
    assert rdss["messages"] == 5000
    assert rdss["valid"] + sum(rdss["errors"].values()) + rdss["sequence parts"] + rdss["copies dropped"] == 5000
    spark = _summary_counts(run.stderr, "spark")
    assert spark["rows"]["valid"] == len(want["valid"]) and spark["rows"]["invalid"] == len(want["invalid"])
    assert spark["messages"] == spark["rows"]["total"] + spark["duplicates skipped"]
    # a second run finds the stream consumed and the tables unchanged
    again = etlstage(tmp_path, *RUN_ONCE[3:], timeout=900)
    assert again.code == 0, again.stderr[-5000:]
    assert tables(tmp_path / "output/rdss") == got


def test_stock_pipeline_survives_kills_of_every_worker_and_the_supervisor(tmp_path):
    """SIGKILL at seeded random moments — each stage's worker and the supervisor, >= 10
    kills — restarting `etlstage run --once` whenever the supervisor died: the same
    tables as an undisturbed run, exactly."""
    import os
    import random
    import signal
    import time

    import psutil

    shutil.copy(ROOT / "stages.yaml", tmp_path / "stages.yaml")
    seed = int(os.environ.get("ETLSTAGE_CRASH_SEED", "8"))
    rng = random.Random(seed)
    cmd = RUN_ONCE
    targets = ["etlstage-kinesis", "etlstage-rdss", "etlstage-spark-load", "supervisor"]
    kills: list[str] = []
    deadline = time.time() + 900
    with open(tmp_path / "log.txt", "ab") as log:
        while len(kills) < 10 and time.time() < deadline:
            proc = subprocess.Popen(cmd, cwd=tmp_path, stdout=log, stderr=log)
            while proc.poll() is None and len(kills) < 10:
                time.sleep(rng.uniform(1.0, 4.0))
                if proc.poll() is not None:
                    break
                target = rng.choice(targets)
                if target == "supervisor":
                    proc.send_signal(signal.SIGKILL)
                    proc.wait()
                else:
                    victims = [
                        p for p in psutil.Process(proc.pid).children() if any(target in part for part in p.cmdline())
                    ]
                    if not victims:
                        continue
                    rng.choice(victims).kill()
                kills.append(target)
            if proc.poll() is None:
                proc.wait(timeout=600)
            if proc.returncode == 0 and len(kills) < 10:
                break  # the run finished before all kills: the tables must still be exact
        final = subprocess.run(cmd, cwd=tmp_path, stdout=log, stderr=log, timeout=600)
    assert final.returncode == 0, (tmp_path / "log.txt").read_text()[-4000:]
    expected = json.loads((tmp_path / ".etlstage/demo/expected.json").read_text())
    want: dict[str, list[tuple[str, str | None]]] = {"valid": [], "invalid": [], "error": []}
    for message_id, fate in expected["messages"].items():
        want[fate["table"]].append((message_id, fate["errorCode"]))
    got = tables(tmp_path / "output/rdss")
    for table in want:
        assert got[table] == sorted(want[table]), f"seed {seed}, kills {kills}: table {table} differs"
    assert len(kills) >= 10, f"seed {seed}: only {len(kills)} kills before the pipeline finished: {kills}"
