"""Delta tables on S3 (``s3a://``, moto's server on loopback), written by the loader on
both engines: each key once, read without Spark (delta-rs); the credentials come from the
environment and never appear in the logs, the status document, the metrics or the state."""

from __future__ import annotations

import json
import shutil
from collections import Counter
from pathlib import Path

import pytest

from tests.conftest import PY
from tests.support.paths import FIXTURES
from tests.support.run_cli import etlstage
from tests.support.s3 import ACCESS_KEY, SECRET_KEY, S3Server, moto_s3

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]
BUCKET = "lake"


def pipeline(tmp: Path, s3: S3Server, ids: list[int]) -> None:
    data = tmp / "in.jsonl"
    data.write_text("".join(json.dumps({"id": i, "name": f"n{i}"}) + "\n" for i in ids))
    conf = s3.spark_conf()
    worker_conf = ", ".join(f'--conf, "{k}={v}"' for k, v in conf.items())
    engine_conf = ", ".join(f'"{k}": "{v}"' for k, v in conf.items())
    (tmp / "stages.yaml").write_text(
        f"""
engine: {{conf: {{{engine_conf}}}}}
stages:
  - {{name: src, type: E, mode: cyclic, command: [{PY}, {FIXTURES / "lines.py"}, {data}, "10"]}}
  - {{name: load, type: L, mode: batch,
     command: [etlstage-spark-load, --format, delta, --output, "s3a://{BUCKET}/t/out", --columns, "id:long=/id",
               "name=/name", --key, /id, --master, "local[2]", {worker_conf}],
     timeouts: {{startup: 600, request: 600}}}}
"""
    )


def ids(s3: S3Server) -> Counter[int]:
    from deltalake import DeltaTable

    table = DeltaTable(f"s3://{BUCKET}/t/out", storage_options=s3.storage_options())
    return Counter(table.to_pyarrow_table(columns=["id"]).column("id").to_pylist())


def test_both_engines_load_s3_each_key_once_without_leaking_the_secret(tmp_path: Path) -> None:
    with moto_s3(tmp_path.parent / f"{tmp_path.name}-s3") as s3:  # its log outside what the run leaves
        s3.create_bucket(BUCKET)
        pipeline(tmp_path, s3, [*range(30), *range(0, 30, 4)])
        metrics = tmp_path / "metrics.prom"
        first = etlstage(tmp_path, "run", "--once", "--no-progress", "--metrics-file", str(metrics), "stages.yaml",
                         timeout=400, env=s3.env())  # fmt: skip
        assert first.code == 0, first.stderr[-3000:]
        assert ids(s3) == Counter(range(30))
        status = etlstage(tmp_path, "status", "--json", "stages.yaml", env=s3.env())
        assert status.code == 0, status.stderr

        pipeline(tmp_path, s3, list(range(45)))
        shutil.rmtree(tmp_path / ".etlstage")  # everything is read again: the MERGE drops it
        second = etlstage(tmp_path, "run", "--engine", "spark", "--master", "local[2]", "--once", "--no-progress",
                          "stages.yaml", timeout=400, env=s3.env())  # fmt: skip
        assert second.code == 0, second.stderr[-3000:]
        assert ids(s3) == Counter(range(45))

    seen = [first.stdout, first.stderr, status.stdout, status.stderr, metrics.read_text(), second.stdout, second.stderr]
    assert ACCESS_KEY not in "".join(seen[2:5])  # the key id may be logged by the AWS SDK, the secret never
    for text in seen:
        assert SECRET_KEY not in text
    for path in tmp_path.rglob("*"):
        if path.is_file():
            assert SECRET_KEY.encode() not in path.read_bytes(), path
