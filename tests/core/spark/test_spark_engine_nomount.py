"""The Spark engine on a loopback standalone cluster whose executors cannot see the
driver's folders: each worker runs in a mount namespace of its own with an empty tmpfs
over the pipeline's folder (its state_dir and the driver-side extractor's spool inside);
the checkpoint and the output are on S3 (moto's server on loopback).

The pipeline uses every way tasks reach the driver: a driver-side extractor's spool, a
T-stage whose poisoned message becomes a dead letter after restarts (tallies), and a
loader writing to S3. It loses nothing and writes exactly the rows expected (every number
but the poisoned one); the executors' own record shows they ran and saw the pipeline's
folder empty.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from etlstage.state.store import StateStore
from tests.conftest import PY, TW
from tests.support.run_cli import etlstage
from tests.support.s3 import moto_s3
from tests.support.spark_cluster import standalone_cluster

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]
N = 60
POISON = "13"

S3_LOADER = """import hashlib, os, sys

import boto3

from etlstage.worker import Loader, main

BUCKET, PREFIX = sys.argv[1], sys.argv[2]
s3 = boto3.client("s3", endpoint_url=os.environ["S3_ENDPOINT"])


class Put(Loader):
    def load(self, messages):  # one object per message, named by its content: replays are absorbed
        for m in messages:
            s3.put_object(Bucket=BUCKET, Key=PREFIX + hashlib.sha256(m).hexdigest(), Body=m)


main(Put())
"""
# the T-stage's wrapper: notes what the executor sees of the pipeline's folder, then runs the worker
LOOK = 'echo "$(hostname): [$(ls -A "$1" | tr "\\n" " ")]" >> "$2"; shift 2; exec "$@"'


def pipeline(folder: Path, tools: Path, prefix: str, conf: dict[str, str], master: str) -> str:
    lines = "".join(f"\n    {k}: {v!r}" for k, v in conf.items())
    (folder / "stages.yaml").write_text(
        f"""
name: nomount
stages:
  - {{name: src, type: E, mode: cyclic, command: [{PY}, {TW}, count, "{N}", "10"]}}
  - name: pick
    type: T
    mode: batch
    batch_size: 5
    instances: 2
    on_failure: deadletter
    restart: {{max_restarts: 2, backoff: 0.05}}
    command: [sh, -c, {LOOK!r}, look, {folder}, {tools / ("seen-" + prefix.strip("/") + ".txt")}, {PY}, {TW}, poison, "{POISON}"]
  - {{name: sink, type: L, command: [{PY}, {tools / "s3load.py"}, lake, {prefix}]}}
engine:
  kind: spark
  master: "{master}"
  checkpoint: s3a://lake/{prefix}checkpoint
  conf:{lines}
"""
    )
    return "stages.yaml"


def rows(s3: object, prefix: str) -> list[str]:
    got = [s3.read("lake", k).decode() for k in s3.keys("lake", prefix) if "/checkpoint/" not in k]  # type: ignore[attr-defined]
    return sorted(got, key=int)


def test_executors_that_cannot_see_the_drivers_folders(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"])
    tools = tmp_path / "tools"  # seen by both: the loader and what the executors report
    tools.mkdir()
    (tools / "s3load.py").write_text(S3_LOADER)
    expected = [str(i) for i in range(N) if str(i) != POISON]
    with moto_s3(tmp_path / "s3") as s3:
        s3.create_bucket("lake")
        for k, v in {**s3.env(), "S3_ENDPOINT": s3.endpoint}.items():
            monkeypatch.setenv(k, v)  # the cluster's processes inherit them; never in Spark's conf
        conf = s3.spark_conf()

        folder = tmp_path / "pipeline"
        folder.mkdir()
        (folder / "only-the-driver-sees-this").write_text("")
        cluster_conf = {**conf, "spark.cores.max": "2", "spark.executor.memory": "512m"}
        name = pipeline(folder, tools, "cluster/", cluster_conf, "spark://placeholder")
        (tmp_path / "cluster").mkdir()
        with standalone_cluster(tmp_path / "cluster", workers=2, memory="1g", hide=[folder]) as master:
            text = (folder / name).read_text().replace("spark://placeholder", master)
            (folder / name).write_text(text)
            run = etlstage(folder, "run", "--once", "--no-progress", name, timeout=600)
            assert run.code == 0, run.stderr[-4000:]
        assert rows(s3, "cluster/") == expected
        assert any("/commits/" in k for k in s3.keys("lake", "cluster/checkpoint/"))

    seen = (tools / "seen-cluster.txt").read_text().splitlines()
    # every T worker ran on an executor, and saw in the pipeline's folder only what the executor
    # made there itself (the workers' own state folders): none of the driver's files
    assert seen and all(line.endswith(": [.etlstage ]") for line in seen), seen
    assert {p.name for p in folder.iterdir()} == {".etlstage", "only-the-driver-sees-this", "stages.yaml"}
    # ... while the driver's folder holds the state, the engine's files and the dead letter
    (db,) = (folder / ".etlstage").rglob(StateStore.FILE)
    store = StateStore(str(db.parent))
    try:
        dead = [(d.stage, d.split()) for d in store.deadletters()]
    finally:
        store.close()
    assert dead == [("pick", [POISON.encode()])], dead
    # the restarts that led there reached the driver's tallies
    tallies = [json.loads(p.read_text()) for p in folder.rglob("spark/*/workers/*/pick-*.json")]
    assert sum(t["restarts"] for t in tallies) >= 2, tallies
