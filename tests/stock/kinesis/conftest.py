"""Real servers on loopback for the Kinesis extractor's tests.

- ``emulator``: moto's server (session-wide), streams named per test.
- ``FaultProxy``: a tiny HTTP proxy in front of it that answers chosen GetRecords calls
  with a Kinesis error (throttling, expired iterator) and notes when each call came.
- ``WorkerProcess``: the worker as a real subprocess, driven with protocol bytes.
"""

from __future__ import annotations

import http.client
import http.server
import itertools
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from etlstage_workers.kinesis.emulator import FAKE_CREDENTIALS, Emulator

from etlstage.protocol.scenario import Scenario
from etlstage.protocol.vocabulary import Mode, StageType

ROOT = Path(__file__).resolve().parents[3]
_names = itertools.count()

os.environ.update(FAKE_CREDENTIALS)


@pytest.fixture(scope="session")
def emulator() -> Any:
    with Emulator() as emu:
        yield emu


@pytest.fixture
def stream(emulator: Emulator, request: pytest.FixtureRequest) -> Any:
    """``stream(shards)`` -> a fresh stream name."""

    def make(shards: int = 1) -> str:
        name = f"t{next(_names)}-{request.node.name[:40]}".replace("[", "-").replace("]", "")
        emulator.create_stream(name, shards)
        return name

    return make


def put(emulator: Emulator, stream: str, records: list[tuple[str, bytes]]) -> None:
    c = emulator.client()
    for i in range(0, len(records), 500):
        chunk = records[i : i + 500]
        reply = c.put_records(StreamName=stream, Records=[{"PartitionKey": k, "Data": d} for k, d in chunk])
        assert reply["FailedRecordCount"] == 0


# --- a fault-injecting proxy ------------------------------------------------------------


class FaultProxy:
    """Forwards to ``upstream``; the first ``fail`` GetRecords calls get ``error`` (or ``drop``) instead."""

    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.fail = 0
        self.fail_at: set[int] = set()  # 1-based GetRecords call numbers to fail
        self.error = "ProvisionedThroughputExceededException"
        self.status = 400  # of the failing answers: 5xx for a server-side failure
        self.drop = False  # close the connection without an answer instead (a network error)
        self.hide_shard: str | None = None  # as if trimmed: not listed, no iterator
        self.get_records_calls: list[float] = []
        self.records_served = 0  # records in the GetRecords replies passed on
        self.failed = 0
        self._lock = threading.Lock()
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def _error(self, status: int, kind: str, message: str) -> None:
                payload = json.dumps({"__type": kind, "message": message}).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/x-amz-json-1.1")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                target = self.headers.get("X-Amz-Target", "")
                if target.endswith(".GetRecords"):
                    with proxy._lock:
                        proxy.get_records_calls.append(time.monotonic())
                        n = len(proxy.get_records_calls)
                        failing = n <= proxy.fail or n in proxy.fail_at
                        if failing:
                            proxy.failed += 1
                    if failing and proxy.drop:
                        self.close_connection = True
                        return
                    if failing:
                        self._error(proxy.status, proxy.error, "injected by the test proxy")
                        return
                if (
                    proxy.hide_shard
                    and target.endswith(".GetShardIterator")
                    and json.loads(body).get("ShardId") == proxy.hide_shard
                ):
                    self._error(400, "ResourceNotFoundException", f"Shard {proxy.hide_shard} does not exist")
                    return
                conn = http.client.HTTPConnection("127.0.0.1", proxy.upstream_port, timeout=30)
                headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "connection")}
                conn.request("POST", self.path, body=body, headers=headers)
                reply = conn.getresponse()
                data = reply.read()
                if target.endswith(".GetRecords") and reply.status == 200:
                    with proxy._lock:
                        proxy.records_served += len(json.loads(data).get("Records", []))
                if proxy.hide_shard and target.endswith(".ListShards") and reply.status == 200:
                    doc = json.loads(data)
                    doc["Shards"] = [s for s in doc["Shards"] if s["ShardId"] != proxy.hide_shard]
                    data = json.dumps(doc).encode()
                self.send_response(reply.status)
                for k, v in reply.getheaders():
                    if k.lower() not in ("content-length", "connection", "transfer-encoding", "server", "date"):
                        self.send_header(k, v)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
                conn.close()

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    @property
    def endpoint_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


@pytest.fixture
def proxy(emulator: Emulator) -> Any:
    p = FaultProxy(emulator.port)
    yield p
    p.close()


# --- the worker as a subprocess ---------------------------------------------------------


class WorkerProcess:
    """``etlstage-kinesis`` as a real child: ETLSTAGE_* env, ``\\n`` per cycle, read to EOP."""

    def __init__(
        self,
        args: list[str],
        state_dir: str,
        mode: str = "cyclic",
        extra_env: dict[str, str] | None = None,
        instance: int = 0,
        instances: int = 1,
    ) -> None:
        scenario = Scenario(StageType.E, Mode(mode), stage="extract", instance=instance, instances=instances)
        env = {**os.environ, **scenario.to_env(), "ETLSTAGE_STATE_DIR": state_dir}
        env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
        env.update(extra_env or {})
        Path(state_dir).mkdir(parents=True, exist_ok=True)
        self.stderr_path = Path(state_dir) / f"stderr-{time.monotonic_ns()}.log"
        self._stderr = open(self.stderr_path, "wb")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "etlstage_workers.kinesis", *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            env=env,
        )

    def cycle(self, timeout: float = 30.0) -> list[bytes]:
        """One request: write EOM, read until EOP; the messages of that window."""
        assert self.proc.stdin and self.proc.stdout
        self.proc.stdin.write(b"\n")
        self.proc.stdin.flush()
        buf = bytearray()
        deadline = time.monotonic() + timeout
        while not buf.endswith(b"\x00"):
            if time.monotonic() > deadline:
                raise TimeoutError(f"no EOP within {timeout} s; stderr:\n{self.stderr()}")
            chunk = os.read(self.proc.stdout.fileno(), 1 << 16)
            if not chunk:
                raise EOFError(f"worker exited (status {self.proc.poll()}) mid-cycle; stderr:\n{self.stderr()}")
            buf += chunk
        body = bytes(buf[:-1])
        assert b"\x00" not in body, "EOP inside a window"
        return body.split(b"\n")[:-1] if body else []

    def read_all(self, timeout: float = 60.0) -> list[bytes]:
        """Plain mode: everything until exit."""
        out, _ = self.proc.communicate(timeout=timeout)
        self._stderr.close()
        assert self.proc.returncode == 0, f"exit {self.proc.returncode}; stderr:\n{self.stderr()}"
        return out.split(b"\n")[:-1] if out else []

    def close_stdin(self, timeout: float = 30.0) -> int:
        assert self.proc.stdin
        self.proc.stdin.close()
        code = self.proc.wait(timeout)
        self._stderr.close()
        return code

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)
        self._stderr.close()

    def stderr(self) -> str:
        if not self._stderr.closed:
            self._stderr.flush()
        return self.stderr_path.read_text(errors="replace")[-4000:]


@pytest.fixture
def spawn() -> Any:
    """``spawn(args, state_dir, ...)`` -> a :class:`WorkerProcess`; leftovers killed at the end."""
    started: list[WorkerProcess] = []

    def make(*args: Any, **kwargs: Any) -> WorkerProcess:
        w = WorkerProcess(*args, **kwargs)
        started.append(w)
        return w

    yield make
    for w in started:
        if w.proc.poll() is None:
            w.kill()


@pytest.fixture
def put_records(emulator: Emulator) -> Any:
    """``put_records(stream, [(key, data), ...])`` through PutRecords."""
    return lambda stream, records: put(emulator, stream, records)
