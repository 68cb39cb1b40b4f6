"""The loader against a real standalone cluster on loopback: one master, one worker, from the pyspark package."""

from __future__ import annotations

import atexit
import os
import signal
import socket
import subprocess
import time
from pathlib import Path

import pyarrow.dataset as ds
import pytest

from tests.support.spark_msgs import LoaderProc, env_for, rdss

pytestmark = pytest.mark.timeout(300)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _kill_group(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(10)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            pass
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait(10)


def _tail(path: str, n: int = 2000) -> str:
    return Path(path).read_text(errors="replace")[-n:] if os.path.exists(path) else ""


def _wait_for_line(path: str, text: str, proc: subprocess.Popen, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{proc.args[1]} exited ({proc.returncode}): {_tail(path)}")
        if os.path.exists(path) and text in _tail(path, 10**9):
            return
        time.sleep(0.3)
    raise TimeoutError(f"{text!r} not seen within {timeout}s in {path}: {_tail(path)}")


@pytest.fixture(scope="module")
def standalone_cluster(tmp_path_factory):
    """``spark://127.0.0.1:PORT`` with one 1-core worker; always torn down (finally + atexit)."""
    import pyspark

    home = os.path.dirname(pyspark.__file__)
    spark_class = os.path.join(home, "bin", "spark-class")
    work = tmp_path_factory.mktemp("cluster")
    env = {
        **os.environ,
        "SPARK_HOME": home,
        "SPARK_LOCAL_IP": "127.0.0.1",
        "SPARK_LOG_DIR": str(work),
        "SPARK_WORKER_DIR": str(work / "worker"),
    }
    port = free_port()
    master_url = f"spark://127.0.0.1:{port}"
    procs: list[subprocess.Popen] = []

    def start(name: str, argv: list[str]) -> tuple[subprocess.Popen, str]:
        log = str(work / f"{name}.log")
        with open(log, "wb") as out:
            proc = subprocess.Popen(
                [spark_class, *argv],
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        procs.append(proc)
        atexit.register(_kill_group, proc)
        return proc, log

    try:
        master, master_log = start(
            "master",
            [
                "org.apache.spark.deploy.master.Master",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--webui-port",
                str(free_port()),
            ],
        )
        _wait_for_line(master_log, "I have been elected leader", master, 120)
        worker, worker_log = start(
            "worker",
            [
                "org.apache.spark.deploy.worker.Worker",
                master_url,
                "--host",
                "127.0.0.1",
                "--webui-port",
                str(free_port()),
                "--cores",
                "1",
                "--memory",
                "1g",
            ],
        )
        _wait_for_line(worker_log, "Successfully registered with master", worker, 120)
        yield master_url
    finally:
        for proc in reversed(procs):
            _kill_group(proc)


def test_loader_on_a_standalone_cluster(standalone_cluster, tmp_path) -> None:
    out, state = str(tmp_path / "out"), str(tmp_path / "state")
    args = [
        "--rdss",
        "--output",
        out,
        "--master",
        standalone_cluster,
        "--conf",
        "spark.executor.memory=512m",
        "--conf",
        "spark.cores.max=1",
    ]
    p = LoaderProc(args, env_for(state), str(tmp_path / "loader.stderr"))
    try:
        p.load([rdss(i) for i in range(50)], timeout=240)
        _a_second_application_gets_no_executor(standalone_cluster, tmp_path)
        p.load([rdss(i, "GENERR002" if i % 2 else None) for i in range(40, 90)], timeout=120)
        assert p.close() == 0
    finally:
        p.kill()
    valid = ds.dataset(os.path.join(out, "valid"), format="parquet").to_table().to_pylist()
    invalid = ds.dataset(os.path.join(out, "invalid"), format="parquet").to_table().to_pylist()
    assert sorted(r["position"] for r in valid) == list(range(50)) + list(range(50, 90, 2))
    assert sorted(r["position"] for r in invalid) == list(range(51, 90, 2))
    assert "Spark: using" in (tmp_path / "loader.stderr").read_text()


def _a_second_application_gets_no_executor(master: str, tmp_path: Path) -> None:
    """The worker's one core belongs to the running loader: another loader's start-up probe
    finds no executor and stops with the cause and the fix (exit 2), before any message."""
    stderr = tmp_path / "blocked.stderr"
    args = ["--rdss", "--output", str(tmp_path / "out2"), "--master", master, "--connect-timeout", "0.5"]
    blocked = LoaderProc(args, env_for(str(tmp_path / "state2")), str(stderr))
    try:
        assert blocked.proc.wait(120) == 2
    finally:
        blocked.kill()
    text = stderr.read_text()
    assert f"the master {master} accepted the application but no executor ran a task within 3s" in text, text[-2000:]
    assert "start a worker (spark-class org.apache.spark.deploy.worker.Worker <master>)" in text
    assert "Traceback" not in text
