"""The Spark loader as the Spark engine's native sink: the worker's tables, exactly once per
micro-batch (a replayed batch is not written twice, a crash while publishing is finished
by the next run), idempotent by key across batches through the key dataset beside the tables."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pyarrow.dataset as ds
import pytest

from tests.conftest import PY
from tests.support.paths import FIXTURES
from tests.support.run_cli import etlstage

pytestmark = [pytest.mark.slow, pytest.mark.timeout(400)]


def write_input(tmp: Path, ids: list[int]) -> Path:
    data = tmp / "in.jsonl"
    data.write_text("".join(json.dumps({"id": i, "name": f"n{i}"}) + "\n" for i in ids))
    return data


def pipeline(tmp: Path, data: Path, per_cycle: int = 10) -> None:
    (tmp / "stages.yaml").write_text(
        f"""
stages:
  - {{name: src, type: E, mode: cyclic, command: [{PY}, {FIXTURES / "lines.py"}, {data}, "{per_cycle}"]}}
  - {{name: load, type: L, mode: batch,
     command: [etlstage-spark-load, --output, out, --columns, "id:long=/id", "name=/name", --key, /id,
               --master, "local[4]"]}}
"""
    )


def run(tmp: Path, **env: str) -> object:
    return etlstage(tmp, "run", "--engine", "spark", "--master", "local[2]", "--once", "--no-progress", "stages.yaml",
                    timeout=300, env=env)  # fmt: skip


def rows(tmp: Path) -> list[tuple[int, str]]:
    table = ds.dataset(str(tmp / "out"), format="parquet").to_table(columns=["id", "name"])
    return sorted(zip(table.column("id").to_pylist(), table.column("name").to_pylist(), strict=True))


def test_exact_rows_with_repeats_across_micro_batches_dropped_by_key(tmp_path: Path) -> None:
    ids = [*range(40), *range(0, 40, 3)]  # the repeats arrive in later micro-batches
    pipeline(tmp_path, write_input(tmp_path, ids))
    r = run(tmp_path)
    assert r.code == 0, r.stderr[-3000:]  # type: ignore[attr-defined]
    assert rows(tmp_path) == [(i, f"n{i}") for i in range(40)]
    # the native sink, not the worker: keys in the dataset beside the tables, no SQLite key index
    assert list((tmp_path / "out" / "_keys").glob("*.parquet"))
    assert not list((tmp_path / ".etlstage").rglob("spark-load-*.sqlite"))
    assert not list((tmp_path / "out" / "_staging").glob("*"))
    log = tmp_path / ".etlstage/stages/spark-checkpoint/etlstage/native/load/sink-log"
    assert len(list(log.iterdir())) == len(
        list((tmp_path / ".etlstage/stages/spark-checkpoint/commits").glob("[0-9]*"))
    )


def forget(commits: Path, batch: int) -> None:
    """Remove a batch's entry from Spark's commit log (and its checksum file)."""
    (commits / str(batch)).unlink()
    (commits / f".{batch}.crc").unlink(missing_ok=True)


def test_a_replayed_micro_batch_is_not_written_twice(tmp_path: Path) -> None:
    pipeline(tmp_path, write_input(tmp_path, list(range(30))))
    assert run(tmp_path).code == 0  # type: ignore[attr-defined]
    commits = tmp_path / ".etlstage/stages/spark-checkpoint/commits"
    last = max(int(p.name) for p in commits.glob("[0-9]*"))
    forget(commits, last)  # Spark forgets it committed the last batch: it replays it
    sink_log = tmp_path / ".etlstage/stages/spark-checkpoint/etlstage/native/load/sink-log"
    assert (sink_log / str(last)).exists()
    r = run(tmp_path)
    assert r.code == 0, r.stderr[-3000:]  # type: ignore[attr-defined]
    assert "was written before (a replay): skipped" in r.stderr  # type: ignore[attr-defined]
    assert rows(tmp_path) == [(i, f"n{i}") for i in range(30)]
    # without the sink log too, the keys keep it exactly once
    forget(commits, last)
    (sink_log / str(last)).unlink()
    assert run(tmp_path).code == 0  # type: ignore[attr-defined]
    assert rows(tmp_path) == [(i, f"n{i}") for i in range(30)]


def test_a_crash_between_staging_and_publishing_is_finished_by_the_next_run(tmp_path: Path) -> None:
    pipeline(tmp_path, write_input(tmp_path, list(range(25))))
    r = run(tmp_path, ETLSTAGE_SPARK_LOAD_CRASH="staged")  # the driver SIGKILLs itself once staged
    assert r.code != 0  # type: ignore[attr-defined]
    staged = list((tmp_path / "out" / "_staging").glob("spark-*/staged"))
    assert staged, "the crash point was not reached"
    r = run(tmp_path)
    assert r.code == 0, r.stderr[-3000:]  # type: ignore[attr-defined]
    assert rows(tmp_path) == [(i, f"n{i}") for i in range(25)]


def test_bad_loader_arguments_stop_the_run_naming_the_stage(tmp_path: Path) -> None:
    (tmp_path / "stages.yaml").write_text(
        f"""
stages:
  - {{name: src, type: E, command: [{PY}, -c, "print(1)"]}}
  - {{name: load, type: L, command: [etlstage-spark-load, --output, out, --format, xml]}}
"""
    )
    r = run(tmp_path)
    assert r.code == 2, r.stderr[-3000:]  # type: ignore[attr-defined]
    assert "stage 'load' (etlstage-spark-load under the Spark engine)" in r.stderr and "xml" in r.stderr  # type: ignore[attr-defined]
    assert "Traceback" not in r.stderr  # type: ignore[attr-defined]
    assert os.path.exists(tmp_path / "stages.yaml")
