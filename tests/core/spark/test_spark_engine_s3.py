"""The Spark engine's checkpoint on S3 (``s3a://``, moto's server on loopback), local[2]:
the driver SIGKILLed at seeded moments during micro-batches, then a rerun; the idempotent
sink ends with exactly the expected set, Spark's logs are on S3, the engine's own files
stay in the driver's state_dir, and the credentials appear nowhere in the output."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.conftest import PY, TW
from tests.core.spark.test_spark_engine_crash import expected, wait_gone
from tests.support.run_cli import ETLSTAGE
from tests.support.s3 import moto_s3
from tests.support.waiting import wait_for

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]
N = 120
SECRET = "s3cr3t-never-logged"


def pipeline(tmp: Path, conf: dict[str, str]) -> None:
    lines = "".join(f"\n    {k}: {v!r}" for k, v in conf.items())
    (tmp / "stages.yaml").write_text(
        f"""
stages:
  - {{name: src, type: E, mode: cyclic, command: [{PY}, {TW}, count, "{N}", "6"]}}
  - {{name: up, type: T, mode: batch, batch_size: 4, command: [{PY}, {TW}, fanout]}}
  - {{name: sink, type: L, command: [{PY}, {TW}, idem, {tmp / "out.txt"}]}}
engine:
  kind: spark
  master: "local[2]"
  checkpoint: s3a://lake/pipelines/numbers/checkpoint
  conf:{lines}
"""
    )


def test_checkpoint_on_s3_survives_driver_kills(tmp_path: Path) -> None:
    seed = int(os.environ.get("ETLSTAGE_CRASH_SEED", "3301"))
    rng = random.Random(seed)
    with moto_s3(tmp_path / "s3") as s3:
        s3.create_bucket("lake")
        pipeline(tmp_path, s3.spark_conf())
        env = {**os.environ, **s3.env(), "AWS_SECRET_ACCESS_KEY": SECRET}

        def start(log: object) -> subprocess.Popen:
            argv = [*ETLSTAGE, "run", "stages.yaml", "--once", "--no-progress"]
            return subprocess.Popen(argv, cwd=tmp_path, stdout=log, stderr=log, env=env, start_new_session=True)

        def batches() -> list[str]:
            return [k for k in s3.keys("lake", "pipelines/numbers/checkpoint/offsets/") if k[-1].isdigit()]

        hits = 0
        with open(tmp_path / "run.log", "ab") as log:
            for kill in range(2):
                planned = len(batches())
                proc = start(log)
                # once this run planned a micro-batch of its own (S3A up, the query running), a seeded moment later
                wait_for(
                    lambda p=proc, n=planned: p.poll() is not None or len(batches()) > n, 240, "a micro-batch planned"
                )
                time.sleep(rng.uniform(0, 4))
                if proc.poll() is None:
                    os.killpg(proc.pid, signal.SIGKILL)
                    hits += 1
                proc.wait(30)
                left = wait_gone(tmp_path)
                assert not left, f"seed {seed}, kill {kill}: worker processes outlived the driver: {left}"
            proc = start(log)
            assert proc.wait(400) == 0, (tmp_path / "run.log").read_text()[-3000:]
        keys = s3.keys("lake", "pipelines/numbers/checkpoint/")
        status = subprocess.run([*ETLSTAGE, "status", "stages.yaml"], cwd=tmp_path, env=env, capture_output=True)
    text = (tmp_path / "run.log").read_text()
    assert hits == 2, f"seed {seed}: the driver had finished before the kills"
    got = (tmp_path / "out.txt").read_text().splitlines()
    assert sorted(got) == expected(), f"seed {seed}"
    assert any("/commits/" in k for k in keys) and any("/offsets/" in k for k in keys), keys
    assert not any("/etlstage/" in k for k in keys), "the engine's own files belong to the driver"
    assert not list(tmp_path.glob("s3a*")), "a URI taken for a local path"
    assert list((tmp_path / ".etlstage").rglob("spark/*/spool")), "the spool is in the driver's state_dir"
    assert SECRET not in text + status.stdout.decode() + status.stderr.decode()
    assert not wait_gone(tmp_path)
