"""docs/spark-engine.md's worked example, as written, on a standalone cluster on loopback
(a master and two one-core workers from the pyspark package): a T-stage on two partitions
spread over the cluster gives exactly the expected results."""

from __future__ import annotations

import os
import re
import shutil
import sys
from collections.abc import Callable
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


SHIPPED_STAGES = """
name: shipped
stages:
  - {{name: numbers, type: E, mode: cyclic, command: ["{py}", "{tw}", count, "40", "10"]}}
  # run from / on the executors: "tools/tag.sh" (relative to this file) resolves there only if shipped
  - {{name: tag, type: T, instances: 2, cwd: /, command: [tools/tag.sh, "{log}", suffix.txt]}}
  - {{name: sink, type: L, command: ["{py}", "{tw}", append, "{out}"]}}
engine:
  kind: spark
  conf: {{spark.cores.max: "1", spark.executor.memory: 512m}}
{ship}
"""
TAG_SH = """#!/bin/sh
# records where it runs from, then hands over to the Python worker shipped beside it
echo "$0" >> "$1"
exec python3 "$(dirname "$0")/lib/tag.py" "$2"
"""
TAG_PY = """import sys

from etlstage.worker import main

with open(sys.argv[1], "rb") as f:  # a shipped file, named by a command argument
    suffix = f.read().strip()
main(lambda messages: [m + suffix for m in messages])
"""


def shipped_pipeline(tmp_path: Path) -> tuple[Path, Path, Path, Callable[[str], None]]:
    """The pipeline folder, where its workers log their path, its output, and a function
    that writes its stages.yaml with the given ``ship`` line."""
    from tests.conftest import TW

    pipe = tmp_path / "pipe"
    (pipe / "tools" / "lib").mkdir(parents=True)
    (pipe / "tools" / "tag.sh").write_text(TAG_SH)
    (pipe / "tools" / "tag.sh").chmod(0o755)
    (pipe / "tools" / "lib" / "tag.py").write_text(TAG_PY)
    (pipe / "suffix.txt").write_text("@shipped\n")
    log, out = tmp_path / "started-from.txt", tmp_path / "out.txt"

    def write(ship: str) -> None:
        text = SHIPPED_STAGES.format(py=sys.executable, tw=TW, log=log, out=out, ship=ship)
        (pipe / "stages.yaml").write_text(text)

    return pipe, log, out, write


def test_shipped_workers_run_from_the_executors_copies(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A T-stage whose program (a folder: a shell script and the Python worker it starts) and
    a file its command names are shipped with engine.ship; without it the start-up probe stops the run naming the program
    and the host; with it every worker process ran the copy in the executor's work directory."""
    monkeypatch.setenv("PATH", os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"])
    pipe, log, out, write = shipped_pipeline(tmp_path)
    (tmp_path / "cluster").mkdir()
    with standalone_cluster(tmp_path / "cluster", workers=1) as master:
        write("")
        missing = etlstage(pipe, "run", "--once", "--no-progress", "--master", master, timeout=240)
        loaded_without_ship = out.exists()
        write("  ship: [tools, suffix.txt]")
        shipped = etlstage(pipe, "run", "--once", "--no-progress", "--master", master, timeout=240)

    assert missing.code == 2, missing.stderr[-3000:]
    assert "stage 'tag': program 'tools/tag.sh' not found (or not executable) on " in missing.stderr
    assert "ship it with engine.ship" in missing.stderr and "Traceback" not in missing.stderr
    assert not loaded_without_ship

    assert shipped.code == 0, shipped.stderr[-4000:]
    assert sorted(out.read_text().split(), key=lambda s: int(s.split("@")[0])) == [f"{i}@shipped" for i in range(40)]
    started = log.read_text().split()
    work = tmp_path / "cluster" / "worker-0"
    # every worker process ran the copy Spark unpacked in the executor's work directory
    assert started and all(Path(p).is_relative_to(work) and p.endswith("/tools.tgz/tag.sh") for p in started), started
    assert not any(Path(p).is_relative_to(pipe) for p in started)
