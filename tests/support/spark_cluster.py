"""Spark servers on loopback from the pyspark package's own scripts: a standalone cluster
(bin/spark-class) and a Spark Connect server (bin/spark-submit).

A cluster has one master and ``workers`` workers of one core each; work and log
directories in the given folder (never inside site-packages); always torn down
(finally + atexit).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path


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


def hidden(folders: list[Path]) -> list[str]:
    """A command prefix: the command runs in its own mount namespace, ``folders`` empty there."""
    if not folders:
        return []
    mounts = " && ".join(f'mount -t tmpfs -o mode=0700 tmpfs "${i + 1}"' for i in range(len(folders)))
    script = f'{mounts} && shift {len(folders)} && exec "$@"'
    return ["unshare", "-m", "--propagation", "private", "sh", "-c", script, "hide", *map(str, folders)]


@contextlib.contextmanager
def standalone_cluster(
    work: Path, workers: int = 1, memory: str = "1g", hide: list[Path] | None = None
) -> Iterator[str]:
    """``spark://127.0.0.1:PORT`` with ``workers`` one-core workers, for the ``with`` block.

    ``hide``: folders the workers (and their executors) must not see: each worker starts in
    a mount namespace of its own (``unshare -m``) with an empty tmpfs over each."""
    import pyspark

    home = os.path.dirname(pyspark.__file__)
    spark_class = os.path.join(home, "bin", "spark-class")
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

    def start(name: str, argv: list[str], prefix: list[str] | None = None) -> tuple[subprocess.Popen, str]:
        log = str(work / f"{name}.log")
        with open(log, "wb") as out:
            proc = subprocess.Popen(
                [*(prefix or []), spark_class, *argv],
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
                *("--host", "127.0.0.1", "--port", str(port), "--webui-port", str(free_port())),
            ],
        )
        _wait_for_line(master_log, "I have been elected leader", master, 120)
        for i in range(workers):
            worker, worker_log = start(
                f"worker-{i}",
                [
                    "org.apache.spark.deploy.worker.Worker",
                    master_url,
                    *("--host", "127.0.0.1", "--webui-port", str(free_port())),
                    *("--cores", "1", "--memory", memory, "--work-dir", str(work / f"worker-{i}")),
                ],
                hidden(hide or []),
            )
            _wait_for_line(worker_log, "Successfully registered with master", worker, 120)
        yield master_url
    finally:
        for proc in reversed(procs):
            _kill_group(proc)


@contextlib.contextmanager
def connect_server(
    work: Path, master: str = "local[2]", env: dict[str, str] | None = None, conf: dict[str, str] | None = None
) -> Iterator[str]:
    """``sc://127.0.0.1:PORT``: a Spark Connect server running ``master``, for the ``with``
    block; its Python processes run this interpreter, with ``env`` added to theirs; ``conf``:
    settings a server takes at its start only (jars, SQL extensions), as its operator sets them."""
    import sys

    import pyspark

    home = os.path.dirname(pyspark.__file__)
    port = free_port()
    log = str(work / "connect-server.log")
    argv = [
        os.path.join(home, "bin", "spark-submit"),
        *("--class", "org.apache.spark.sql.connect.service.SparkConnectServer"),
        *("--name", "etlstage tests: Spark Connect", "--master", master),
        *("--conf", f"spark.connect.grpc.binding.port={port}"),
        *("--conf", "spark.connect.grpc.binding.address=127.0.0.1"),
        *("--conf", f"spark.local.dir={work / 'local'}"),
        *("--conf", "spark.ui.enabled=false"),
        *(a for k, v in (conf or {}).items() for a in ("--conf", f"{k}={v}")),
    ]
    server_env = {
        **os.environ,
        **(env or {}),
        "SPARK_HOME": home,
        "SPARK_LOCAL_IP": "127.0.0.1",
        "PYSPARK_PYTHON": sys.executable,
    }
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            argv, stdout=out, stderr=subprocess.STDOUT, env=server_env, cwd=work,
            stdin=subprocess.DEVNULL, start_new_session=True,
        )  # fmt: skip
    atexit.register(_kill_group, proc)
    try:
        _wait_for_line(log, "Spark Connect server started", proc, 120)
        yield f"sc://127.0.0.1:{port}"
    finally:
        _kill_group(proc)


__all__ = ["connect_server", "free_port", "standalone_cluster"]
