"""The Spark engine through Spark Connect (``--master sc://...``): a Connect server on
loopback started from the pyspark package's bin/spark-submit runs the query; this
process is only its client, with no SparkContext of its own."""

from __future__ import annotations

import os
import shutil
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from tests.core.spark.test_spark_engine_cluster import documented_example, shipped_pipeline
from tests.support.paths import EXAMPLES
from tests.support.run_cli import etlstage
from tests.support.spark_cluster import connect_server

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    work = tmp_path_factory.mktemp("connect")
    with connect_server(work) as url:
        yield url


def processes_under(folder: Path) -> list[str]:
    """Processes (other than this one's) running in ``folder`` or naming it: the run's workers."""
    found = []
    for p in psutil.process_iter(["pid", "cmdline", "cwd"]):
        if p.info["pid"] == os.getpid():
            continue
        cwd, cmdline = p.info["cwd"] or "", p.info["cmdline"] or []
        if Path(cwd).is_relative_to(folder) or any(str(folder) in arg for arg in cmdline):
            found.append(f"{p.info['pid']}: {' '.join(cmdline)[:200]}")
    return found


def test_worked_example_through_spark_connect(server: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The documented example, its master swapped for the Connect server: exactly the numbers
    1 to 200, 8 micro-batches in the checkpoint, and the workers (which live in the
    server's Python processes) stopped when the run ends — not a minute later, when Spark
    would retire its idle Python processes."""
    monkeypatch.setenv("PATH", os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"])
    folder = tmp_path / "examples"
    shutil.copytree(EXAMPLES, folder)
    (folder / "spark-example.yaml").write_text(documented_example())
    run = etlstage(folder, "run", "--once", "--no-progress", "--master", server, "spark-example.yaml", timeout=300)
    assert run.code == 0, run.stderr[-4000:]
    assert "Traceback" not in run.stderr
    assert sorted((folder / "output" / "numbers.txt").read_text().splitlines(), key=int) == [
        str(i) for i in range(1, 201)
    ]
    assert "micro-batches committed in this run: 8" in run.stderr, run.stderr[-2000:]
    status = etlstage(folder, "status", "spark-example.yaml")
    assert "micro-batches committed: 8" in status.stdout and "in flight: none" in status.stdout, status.stdout
    deadline = time.monotonic() + 15  # the workers' stdin closes, they finish; Spark's idle timeout is 60 s
    while processes_under(folder) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert processes_under(folder) == []


def test_shipped_workers_through_spark_connect(server: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """engine.ship through Spark Connect: the session's artifacts instead of the context's
    files. Without it the start-up probe names the program; with it every worker ran the
    copy the server unpacked, never the original."""
    monkeypatch.setenv("PATH", os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"])
    pipe, log, out, write = shipped_pipeline(tmp_path)
    write("")
    missing = etlstage(pipe, "run", "--once", "--no-progress", "--master", server, timeout=240)
    assert missing.code == 2, missing.stderr[-3000:]
    assert "stage 'tag': program 'tools/tag.sh' not found (or not executable) on " in missing.stderr
    assert "Traceback" not in missing.stderr
    assert not out.exists()

    write("  ship: [tools, suffix.txt]")
    shipped = etlstage(pipe, "run", "--once", "--no-progress", "--master", server, timeout=240)
    assert shipped.code == 0, shipped.stderr[-4000:]
    assert sorted(out.read_text().split(), key=lambda s: int(s.split("@")[0])) == [f"{i}@shipped" for i in range(40)]
    started = log.read_text().split()
    # the session's copy, named with the run's tag: "<tag>-tools.tgz/tag.sh"
    assert started and all(p.endswith("-tools.tgz/tag.sh") for p in started), started
    assert not any(Path(p).is_relative_to(pipe) for p in started)


def test_an_unreachable_connect_server_is_a_clear_error(tmp_path: Path) -> None:
    from tests.support.spark_cluster import free_port

    (tmp_path / "stages.yaml").write_text(documented_example())
    run = etlstage(tmp_path, "run", "--once", "--no-progress", "--master", f"sc://127.0.0.1:{free_port()}", timeout=120)
    assert run.code == 2, run.stderr[-3000:]
    assert "Traceback" not in run.stderr
    assert "sc://127.0.0.1:" in run.stderr
