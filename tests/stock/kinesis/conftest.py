"""Real servers on loopback for the Kinesis extractor's tests.

- ``emulator``: moto's server (session-wide), streams named per test.
- ``FaultProxy``: a tiny HTTP proxy in front of it that answers chosen GetRecords calls
  with a Kinesis error (throttling, expired iterator) and notes when each call came.
- ``spawn``: the worker as a real subprocess (tests/support/worker_child.py), driven with protocol bytes.
"""

from __future__ import annotations

import http.client
import http.server
import itertools
import json
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from etlstage_workers.kinesis.emulator import FAKE_CREDENTIALS, Emulator

from tests.support.worker_child import WorkerChild, spawner

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


def _kinesis(args: list[str], state_dir: str, mode: str = "cyclic", **kwargs: Any) -> WorkerChild:
    """``etlstage-kinesis`` as a real child: ETLSTAGE_* env, ``\\n`` per cycle, read to EOP."""
    return WorkerChild("etlstage_workers.kinesis", args, state_dir, mode=mode, stage="extract", **kwargs)


@pytest.fixture
def spawn() -> Iterator[Any]:
    """``spawn(args, state_dir, ...)`` -> a :class:`WorkerChild`; leftovers killed at the end."""
    yield from spawner(_kinesis)


@pytest.fixture
def put_records(emulator: Emulator) -> Any:
    """``put_records(stream, [(key, data), ...])`` through PutRecords."""
    return lambda stream, records: put(emulator, stream, records)
