"""docs/spark-engine.md's worked example, as written, on a standalone cluster on loopback
(a master and two one-core workers from the pyspark package): a T-stage on two partitions
spread over the cluster gives exactly the expected results."""

from __future__ import annotations

import os
import re
import shutil
import sys
from pathlib import Path

import pytest

from tests.support.paths import EXAMPLES, ROOT
from tests.support.run_cli import etlstage
from tests.support.spark_cluster import standalone_cluster

pytestmark = [pytest.mark.slow, pytest.mark.timeout(420)]


def documented_example() -> str:
    text = (ROOT / "docs" / "spark-engine.md").read_text()
    section = text[text.index("## Worked example") :]
    return re.search(r"```yaml\n(.*?)```", section, re.S).group(1)  # type: ignore[union-attr]


def test_worked_example_on_a_standalone_cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # the example's `python3` must be this environment's (with etlstage), on the driver and the executors
    monkeypatch.setenv("PATH", os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"])
    folder = tmp_path / "examples"
    shutil.copytree(EXAMPLES, folder)
    (folder / "spark-example.yaml").write_text(documented_example())
    (tmp_path / "cluster").mkdir()
    with standalone_cluster(tmp_path / "cluster", workers=2) as master:
        run = etlstage(folder, "run", "--once", "--no-progress", "--master", master, "spark-example.yaml", timeout=360)
        assert run.code == 0, run.stderr[-4000:]
        status = etlstage(folder, "status", "spark-example.yaml")
    assert sorted((folder / "output" / "numbers.txt").read_text().splitlines(), key=int) == [
        str(i) for i in range(1, 201)
    ]
    assert "micro-batches committed: 8" in status.stdout and "in flight: none" in status.stdout, status.stdout
    # both workers ran tasks: each has an application folder with executor logs
    apps = [p for p in (tmp_path / "cluster").glob("worker-*/app-*") if p.is_dir()]
    assert len({p.parent.name for p in apps}) == 2, apps
