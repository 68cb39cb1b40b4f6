"""The HTTP endpoints against hostile clients: idle and slow connections, too many of them,
a foreign ``Host`` (DNS rebinding), hostile strings in the inlined state."""

from __future__ import annotations

import http.client
import json
import logging
import resource
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Iterator

import pytest

from etlstage.observe import server
from etlstage.observe.live import Snapshot
from tests.support.live_run import URL_LINE
from tests.support.run_cli import ETLSTAGE


def _doc(name: str = "demo") -> Snapshot:
    return Snapshot({"pipeline": name}, {"time": 0.0, "running": [], "name": name})


@pytest.fixture
def endpoint(monkeypatch: pytest.MonkeyPatch) -> Iterator[server.ObserveServer]:
    monkeypatch.setattr(server, "IDLE_SECONDS", 0.5)
    monkeypatch.setattr(server, "REQUEST_SECONDS", 1.5)
    monkeypatch.setattr(server, "MAX_CONNECTIONS", 4)
    monkeypatch.delenv(server.HOSTS_ENV, raising=False)
    srv = server.ObserveServer(server.Snapshots(_doc), "127.0.0.1", 0)
    srv.start()
    yield srv
    srv.stop()


def _connect(port: int) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=5)


def _closed_within(sock: socket.socket, seconds: float) -> bytes:
    """Everything the server sent until it closed ``sock``; fails if it stays open ``seconds``."""
    sock.settimeout(seconds)
    got = b""
    try:
        while chunk := sock.recv(4096):
            got += chunk
    except TimeoutError:
        pytest.fail(f"the server kept the connection open over {seconds}s")
    return got


def _get(port: int, path: str = "/api/status", host: str | None = None) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    conn.putrequest("GET", path, skip_host=host is not None)
    if host is not None:
        conn.putheader("Host", host)
    conn.endheaders()
    resp = conn.getresponse()
    body = resp.read()
    conn.close()
    return resp.status, body


def test_an_idle_connection_is_closed(endpoint: server.ObserveServer) -> None:
    with _connect(endpoint.port) as sock:
        assert _closed_within(sock, 1.2) == b""  # the idle timeout, before the 1.5 s deadline


def test_a_request_trickled_a_byte_at_a_time_is_cut_off(endpoint: server.ObserveServer) -> None:
    with _connect(endpoint.port) as sock:
        start = time.monotonic()
        with pytest.raises(OSError):  # the server shuts the connection: a send fails or...
            for byte in b"GET /api/status HTTP/1.1\r\nHost: 127.0.0.1\r\n" * 20:
                sock.send(bytes([byte]))
                time.sleep(0.2)  # the client's pace (under the idle timeout), not synchronisation
                if time.monotonic() - start > 10:
                    pytest.fail("a slow request kept its connection for 10 s")
        assert time.monotonic() - start < 5


def test_connections_over_the_cap_are_answered_503_and_closed(endpoint: server.ObserveServer) -> None:
    held = [_connect(endpoint.port) for _ in range(server.MAX_CONNECTIONS)]
    try:
        # the held ones are accepted in order: wait until all four are being served
        deadline = time.monotonic() + 5
        while endpoint.httpd.slots._value > 0:  # type: ignore[attr-defined]
            assert time.monotonic() < deadline, "the held connections were never accepted"
            time.sleep(0.01)
        with _connect(endpoint.port) as extra:
            assert _closed_within(extra, 2.0).startswith(b"HTTP/1.0 503")
    finally:
        for sock in held:
            sock.close()
    deadline = time.monotonic() + 5
    while True:  # the slots come back once the held connections are gone
        try:
            assert _get(endpoint.port)[0] == 200
            break
        except (AssertionError, http.client.HTTPException, OSError):
            assert time.monotonic() < deadline
            time.sleep(0.05)


def test_a_foreign_host_header_is_refused(endpoint: server.ObserveServer) -> None:
    port = endpoint.port
    assert _get(port, host=f"evil.example:{port}")[0] == 421
    assert _get(port, "/", host="evil.example")[0] == 421
    for host in (f"127.0.0.1:{port}", f"localhost:{port}", "LOCALHOST", f"[::1]:{port}"):
        assert _get(port, host=host)[0] == 200, host
    with _connect(port) as sock:  # HTTP/1.0 without a Host: no browser sends that
        sock.sendall(b"GET /api/status HTTP/1.0\r\n\r\n")
        assert _closed_within(sock, 1.2).startswith(b"HTTP/1.0 200")


def test_more_hosts_can_be_allowed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(server.HOSTS_ENV, "etl.example.org")
    assert server.allowed_hosts("127.0.0.1") >= {"etl.example.org", "localhost"}  # type: ignore[operator]
    monkeypatch.setenv(server.HOSTS_ENV, "*")
    assert server.allowed_hosts("127.0.0.1") is None


def test_binding_beyond_loopback_warns(caplog: pytest.LogCaptureFixture) -> None:
    for host, warned in (("0.0.0.0", True), ("127.0.0.1", False)):
        caplog.clear()
        srv = server.ObserveServer(server.Snapshots(_doc), host, 0)
        with caplog.at_level(logging.WARNING, logger="etlstage.http"):
            srv.start()
        srv.stop()
        assert any("not loopback" in r.getMessage() for r in caplog.records) is warned, host


def test_the_inlined_state_has_no_markup(endpoint: server.ObserveServer) -> None:
    hostile = '<!--<script></script><b x="'
    srv = server.ObserveServer(server.Snapshots(lambda: _doc(hostile)), "127.0.0.1", 0)
    srv.start()
    try:
        status, page = _get(srv.port, "/")
    finally:
        srv.stop()
    assert status == 200
    inlined = page.split(b'<script id="initial-state" type="application/json">')[1].split(b"</script>")[0]
    assert b"<" not in inlined
    assert json.loads(inlined)["name"] == hostile


FLOOD_STAGES = """
    stages:
      - {name: src, type: E, mode: cyclic, poll_interval: 0.05, command: ["{PY}", "{TW}", count, "100000000", "10"]}
      - {name: t, type: T, restart: {backoff: 0.05}, command: ["{PY}", crash_once.py]}
      - {name: sink, type: L, command: ["{PY}", "{TW}", append, out.txt]}
"""
CRASH_ONCE = """
import os
from etlstage.worker import Transformer, main


class CrashOnce(Transformer):
    def process(self, messages):
        if os.path.exists("crash") and not os.path.exists("crashed"):
            open("crashed", "w").close()
            os._exit(3)
        return messages


main(CrashOnce())
"""


@pytest.mark.slow
def test_a_flood_of_idle_connections_does_not_take_the_pipeline_down(pdir) -> None:
    """Up to 1,000 connections opened against a supervisor limited to 96 descriptors; the
    T-worker then crashes and must be restarted (new pipes) while they are held."""
    pdir.write(FLOOD_STAGES)
    (pdir.path / "crash_once.py").write_text(CRASH_ONCE)

    def few_descriptors() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (96, 96))

    proc = subprocess.Popen(
        [*ETLSTAGE, "run", "stages.yaml", "--no-progress", "--http", "127.0.0.1:0"],
        cwd=pdir.path,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=few_descriptors,
    )
    assert proc.stderr is not None
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stderr or []), daemon=True)
    reader.start()
    flood: list[socket.socket] = []
    try:
        deadline = time.monotonic() + 30
        while not (found := [m.group(1) for line in list(lines) if (m := URL_LINE.search(line))]):
            assert proc.poll() is None and time.monotonic() < deadline, "".join(lines)
            time.sleep(0.05)
        port = int(found[0].rstrip("/").rsplit(":", 1)[1])
        refused, until = 0, time.monotonic() + 20
        while len(flood) + refused < 1000 and time.monotonic() < until:
            try:
                flood.append(socket.create_connection(("127.0.0.1", port), timeout=1))
            except OSError:  # the backlog is full: the server takes no more for now (that is fine too)
                refused += 1
        (pdir.path / "crash").touch()  # the T-worker exits at its next batch: a restart is due
        out, crashed = pdir.path / "out.txt", pdir.path / "crashed"
        until = time.monotonic() + 60
        while not crashed.exists():
            assert proc.poll() is None and time.monotonic() < until, "".join(lines)[-3000:]
            time.sleep(0.05)
        seen = len(out.read_text().splitlines())
        while len(out.read_text().splitlines()) < seen + 200:  # the restarted worker carries on
            assert proc.poll() is None and time.monotonic() < until, "".join(lines)[-3000:]
            time.sleep(0.1)
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
    finally:
        for sock in flood:
            sock.close()
        if proc.poll() is None:
            proc.kill()
    reader.join(timeout=10)
    err = "".join(lines)
    assert proc.returncode == 0, err[-3000:]
    assert "Too many open files" not in err and "internal error" not in err, err[-3000:]
    assert "t failed" in err  # the worker was restarted during the flood
