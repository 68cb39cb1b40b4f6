"""The repository's stages.yaml, end to end on embedded defaults: Kinesis emulator ->
RDSS transformer -> Spark loader, 5,000 generated RDSS records with every kind of bad
input; the Parquet tables must hold exactly the expected messages."""

from __future__ import annotations

import json
import os
import random
import shutil
import sqlite3
import subprocess
import time
from pathlib import Path

import psutil
import pyarrow.dataset as ds
import pytest

from tests.support.run_cli import RUN_ONCE, etlstage

ROOT = Path(__file__).resolve().parents[2]


def tables(out: Path) -> dict[str, list[tuple[str, str | None]]]:
    """(messageId, errorCode) of each table's rows, read without Spark (Delta: delta-rs)."""
    from deltalake import DeltaTable

    got = {}
    for table in ("valid", "invalid", "error"):
        path = out / table
        if (path / "_delta_log").is_dir():
            rows = DeltaTable(str(path)).to_pyarrow_table(columns=["messageId", "errorCode"]).to_pylist()
        elif path.exists():
            rows = ds.dataset(str(path), format="parquet").to_table(columns=["messageId", "errorCode"]).to_pylist()
        else:
            rows = []
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


# One undisturbed run takes ~35 s on two busy cores (a JVM start and two Spark jobs).
FULL_RUN_S = 150


@pytest.mark.slow  # over 10 s
@pytest.mark.timeout(2 * FULL_RUN_S + 30)
def test_stock_pipeline_loads_exactly_the_expected_tables(tmp_path):
    shutil.copy(ROOT / "stages.yaml", tmp_path / "stages.yaml")
    run = etlstage(tmp_path, *RUN_ONCE[3:], timeout=FULL_RUN_S)
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
    again = etlstage(tmp_path, *RUN_ONCE[3:], timeout=FULL_RUN_S)
    assert again.code == 0, again.stderr[-5000:]
    assert tables(tmp_path / "output/rdss") == got


# Bounds of the kill test, inside its pytest timeout: kills and restarts, the run after the
# last kill, and a final undisturbed run (the stream is consumed by then: it only checks).
KILL_PHASE_S = 240
FINISH_S = 300
FINAL_RUN_S = 300
TARGETS = ("etlstage-kinesis", "etlstage-rdss", "etlstage-spark-load", "supervisor")


def _loader_holds_a_batch(state_dir: Path) -> bool:
    """The Spark loader has claimed a batch's keys and not committed it yet (its key index);
    with Delta tables (no key index), once it has committed a batch: more are on their way."""
    if list(state_dir.parent.parent.glob("output/rdss/*/_delta_log/*.json")):
        return True
    for db in state_dir.glob("stages/spark/spark-load-*.sqlite"):
        try:
            with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=0.5) as conn:
                if conn.execute("SELECT count(*) FROM batches WHERE state = 'claimed'").fetchone()[0]:
                    return True
        except sqlite3.Error:  # not created yet, or busy
            pass
    return False


def _children(proc: subprocess.Popen, target: str) -> list[psutil.Process]:
    found = []
    for child in psutil.Process(proc.pid).children():
        try:
            # the program itself (a console script runs as: python /venv/bin/<name> ...), not
            # a process that only mentions it, such as etlstage-kinesis-emulator
            if target in (os.path.basename(a) for a in child.cmdline()[:2]):
                found.append(child)
        except psutil.Error:  # it exited (or is a zombie) while we looked
            pass
    return found


def _victim(proc: subprocess.Popen, target: str, rng: random.Random, until: float, busy: Path | None):
    """The process to kill for ``target`` once it is there (with ``busy``, the loader's state:
    once it holds a batch), or None when the run ended first."""
    while proc.poll() is None and time.monotonic() < until:
        if target == "supervisor":
            return psutil.Process(proc.pid)
        found = _children(proc, target)
        if found and (busy is None or _loader_holds_a_batch(busy)):
            return rng.choice(found)
        time.sleep(0.05)
    return None


@pytest.mark.slow  # over 10 s
@pytest.mark.timeout(KILL_PHASE_S + FINISH_S + FINAL_RUN_S + 30)
def test_stock_pipeline_survives_kills_of_every_worker_and_the_supervisor(tmp_path):
    """SIGKILL at seeded random moments — each stage's worker and the supervisor, each at
    least once, 10 kills; the loader first while it holds a batch — restarting `etlstage run
    --once` whenever the supervisor died: the same tables as an undisturbed run, exactly."""
    shutil.copy(ROOT / "stages.yaml", tmp_path / "stages.yaml")
    seed = int(os.environ.get("ETLSTAGE_CRASH_SEED", "8"))
    print(f"ETLSTAGE_CRASH_SEED={seed}")
    rng = random.Random(seed)
    plan = [*rng.sample(TARGETS, len(TARGETS)), *(rng.choice(TARGETS) for _ in range(6))]
    cmd = RUN_ONCE
    kills: list[str] = []
    deadline = time.monotonic() + KILL_PHASE_S
    with open(tmp_path / "log.txt", "ab") as log:
        while len(kills) < len(plan) and time.monotonic() < deadline:
            proc = subprocess.Popen(cmd, cwd=tmp_path, stdout=log, stderr=log)
            while len(kills) < len(plan):
                time.sleep(rng.uniform(0.5, 2.5))
                target = plan[len(kills)]
                # the loader's first kill while it holds a batch (later ones: whenever drawn, as the
                # data may all be loaded by then)
                first_loader_kill = target == "etlstage-spark-load" and target not in kills
                busy = tmp_path / ".etlstage" / "rdss" if first_loader_kill else None  # the pipeline's state
                victim = _victim(proc, target, rng, deadline, busy)
                if victim is None:
                    break
                try:
                    victim.kill()
                except psutil.NoSuchProcess:
                    continue  # it ended just now: draw the moment again
                if victim.pid == proc.pid:
                    proc.wait()
                kills.append(plan[len(kills)])
            try:
                proc.wait(timeout=max(1.0, deadline - time.monotonic()) if len(kills) < len(plan) else FINISH_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
                target = plan[len(kills)] if len(kills) < len(plan) else "none"
                pytest.fail(f"seed {seed}: the run did not end (kills {kills}, waiting for {target}); see {tmp_path}")
            if proc.returncode == 0 and len(kills) < len(plan):
                break  # the run finished before all kills: fails below, naming the seed
        final = subprocess.run(cmd, cwd=tmp_path, stdout=log, stderr=log, timeout=FINAL_RUN_S)
    # every target first, then random draws: a fast run may end before the last draws land
    assert kills == plan[: len(kills)], f"seed {seed}: killed {kills}, planned {plan}"
    assert set(kills) == set(TARGETS), f"seed {seed}: killed {kills}: not every target"
    assert final.returncode == 0, (tmp_path / "log.txt").read_text()[-4000:]
    expected = json.loads((tmp_path / ".etlstage/demo/expected.json").read_text())
    want: dict[str, list[tuple[str, str | None]]] = {"valid": [], "invalid": [], "error": []}
    for message_id, fate in expected["messages"].items():
        want[fate["table"]].append((message_id, fate["errorCode"]))
    got = tables(tmp_path / "output/rdss")
    for table in want:
        assert got[table] == sorted(want[table]), f"seed {seed}, kills {kills}: table {table} differs"
