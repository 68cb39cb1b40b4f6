"""Delta tables from the Spark loader: one dedupe record, the table itself, on both engines.

The same messages loaded by the worker (supervisor engine) and then again by the native
sink (``--engine spark``), with the pipeline's state forgotten in between so that every
message comes again, leave each key once; a micro-batch Spark replays leaves the table
as it was (no new version). The tables are read without Spark (delta-rs), as another engine would.
"""

from __future__ import annotations

import json
import shutil
from collections import Counter
from pathlib import Path

import pytest

from tests.conftest import PY
from tests.support.paths import FIXTURES
from tests.support.run_cli import etlstage

pytestmark = [pytest.mark.slow, pytest.mark.timeout(2400)]


def write_input(tmp: Path, ids: list[int]) -> Path:
    data = tmp / "in.jsonl"
    data.write_text("".join(json.dumps({"id": i, "name": f"n{i}"}) + "\n" for i in ids))
    return data


def pipeline(tmp: Path, data: Path, output: str = "out", per_cycle: int = 20) -> None:
    (tmp / "stages.yaml").write_text(
        f"""
stages:
  - {{name: src, type: E, mode: cyclic, command: [{PY}, {FIXTURES / "lines.py"}, {data}, "{per_cycle}"]}}
  - {{name: load, type: L, mode: batch,
     command: [etlstage-spark-load, --format, delta, --output, {output}, --columns, "id:long=/id", "name=/name",
               --key, /id, --master, "local[2]"],
     timeouts: {{startup: 600, request: 600}}}}
"""
    )


def run(tmp: Path, engine: str, **env: str) -> str:
    args = ["--engine", "spark", "--master", "local[2]"] if engine == "spark" else []
    r = etlstage(tmp, "run", *args, "--once", "--no-progress", "stages.yaml", timeout=600, env=env)
    assert r.code == 0, r.stderr[-3000:]
    return r.stderr


def ids(table: str, **storage: str) -> Counter[int]:
    from deltalake import DeltaTable

    data = DeltaTable(table, storage_options=storage or None).to_pyarrow_table(columns=["id", "_key"])
    assert data.column("_key").to_pylist() == [str(i) for i in data.column("id").to_pylist()]
    return Counter(data.column("id").to_pylist())


def test_supervisor_then_spark_then_supervisor_each_key_once(tmp_path: Path) -> None:
    """Each engine reads everything again (its state forgotten): the table's MERGE drops it all."""
    pipeline(tmp_path, write_input(tmp_path, [*range(40), *range(0, 40, 3)]))
    err = run(tmp_path, "supervisor")
    assert ids(str(tmp_path / "out")) == Counter(range(40)), err[-3000:]
    assert not list(tmp_path.rglob("spark-load-*.sqlite")), "a Delta table needs no key index"

    pipeline(tmp_path, write_input(tmp_path, list(range(60))))
    shutil.rmtree(tmp_path / ".etlstage")  # the extractor starts from line 0 again
    err = run(tmp_path, "spark")
    assert ids(str(tmp_path / "out")) == Counter(range(60)), err[-3000:]

    # Spark forgets it committed its last micro-batch and replays it: the table is left as
    # it was, no new version (Delta's idempotent write skips the replay; the MERGE alone
    # would also insert nothing: test_spark_delta_txn.py holds the pair to it alone)
    from deltalake import DeltaTable

    version = DeltaTable(str(tmp_path / "out")).version()
    commits = tmp_path / ".etlstage/stages/spark-checkpoint/commits"
    last = max(int(p.name) for p in commits.glob("[0-9]*"))
    (commits / str(last)).unlink()
    (commits / f".{last}.crc").unlink(missing_ok=True)
    err = run(tmp_path, "spark")
    assert DeltaTable(str(tmp_path / "out")).version() == version, err[-3000:]
    assert ids(str(tmp_path / "out")) == Counter(range(60))

    # a new checkpoint: its micro-batch ids count from 0 again and are new batches (a new
    # query id in Delta's txnAppId), not replays of the old query's
    pipeline(tmp_path, write_input(tmp_path, list(range(80))))
    shutil.rmtree(tmp_path / ".etlstage")
    err = run(tmp_path, "spark")
    assert ids(str(tmp_path / "out")) == Counter(range(80)), err[-3000:]

    shutil.rmtree(tmp_path / ".etlstage")
    err = run(tmp_path, "supervisor")
    assert ids(str(tmp_path / "out")) == Counter(range(80)), err[-3000:]
    assert not (tmp_path / "out" / "_staging").exists() and not (tmp_path / "out" / "_keys").exists()
