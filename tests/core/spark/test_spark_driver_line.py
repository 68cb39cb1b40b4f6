"""The driver line without Spark: a native stage's write-once files (a Kinesis task's
reached positions) kept on the driver, first writer wins, names confined to the stage's folder."""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
import time
from pathlib import Path

import pytest

from etlstage.errors import PipelineError
from etlstage.spark.driver_line import AUTH_DEADLINE, MAX_HEADER, TOKEN_BYTES, DriverLine, KeepOnce, keep_once, relative
from tests.support.waiting import wait_for


def test_keep_once_keeps_the_first_attempts_file_and_reads_it_back(tmp_path: Path) -> None:
    def once(header: dict, payload: bytes) -> tuple[dict, bytes]:
        path = tmp_path / relative(header["name"])
        if header.get("peek"):
            return ({"found": True}, path.read_bytes()) if path.exists() else ({"found": False}, b"")
        return {"found": True}, keep_once(path, payload)

    with DriverLine({"once": once}) as line:
        keep = KeepOnce.from_option(KeepOnce(line.address, "kin").to_option())  # as a string option travels
        assert keep is not None
        assert keep("kinesis-reached/3/shard-0.json", None) is None
        assert keep("kinesis-reached/3/shard-0.json", b"first") == b"first"
        assert keep("kinesis-reached/3/shard-0.json", b"second") == b"first"  # a second attempt never replaces it
        assert keep("kinesis-reached/3/shard-0.json", None) == b"first"
        with pytest.raises(PipelineError, match="not a file name inside the stage's folder"):
            keep("../../state.db", b"x")
    assert (tmp_path / "kinesis-reached" / "3" / "shard-0.json").read_bytes() == b"first"


def test_a_task_that_cannot_reach_the_driver_fails_naming_the_address() -> None:
    with DriverLine({}) as line:
        gone = line.address
    with pytest.raises(PipelineError, match=rf"cannot reach the driver line at 127.0.0.1:{gone.port} \(spool\)"):
        list(gone.read("s", "0-0.bin"))


# --- who may talk to it, and how much ----------------------------------------------------------


def _reads(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The sizes the driver line reads (each ``_exactly`` call's), recorded as it runs."""
    import etlstage.spark.driver_line as line_module

    sizes: list[int] = []
    real = line_module._exactly

    def spy(sock: socket.socket, n: int, deadline: float | None = None) -> bytes:
        sizes.append(n)
        return real(sock, n, deadline)

    monkeypatch.setattr(line_module, "_exactly", spy)
    return sizes


def _closed_within(sock: socket.socket, seconds: float) -> bytes:
    """What the driver line sent before it closed ``sock``; fails if it is still open after ``seconds``."""
    sock.settimeout(seconds)
    got = b""
    while True:
        chunk = sock.recv(65536)  # socket.timeout here: the driver line kept it open
        if not chunk:
            return got
        got += chunk


def test_an_unauthenticated_client_announcing_a_huge_header_is_cut_off_unread(monkeypatch: pytest.MonkeyPatch) -> None:
    sizes = _reads(monkeypatch)
    with (
        DriverLine({"tally": lambda h, p: ({}, b"")}) as line,
        socket.create_connection(("127.0.0.1", line.address.port)) as sock,
    ):
        sock.sendall(struct.pack(">I", 0xFFFFFFF0) + b"{" * 100_000)  # a header of ~4 GiB, no token
        answer = _closed_within(sock, 10)
    assert b"not this run's token" in answer
    assert sizes == [TOKEN_BYTES]  # the token alone was read, nothing it announced


def test_an_authenticated_request_over_the_bounds_is_refused_before_it_is_read(monkeypatch: pytest.MonkeyPatch) -> None:
    sizes = _reads(monkeypatch)
    with DriverLine({"tally": lambda h, p: ({}, b"")}, max_payload=1000) as line:
        with socket.create_connection(("127.0.0.1", line.address.port)) as sock:
            sock.sendall(line.token.encode() + struct.pack(">I", MAX_HEADER + 1))
            assert b"request header of" in _closed_within(sock, 10)
        with pytest.raises(PipelineError, match=r"refused a request payload of 1001 bytes \(at most 1000\)"):
            line.address.call("tally", {}, b"x" * 1001)
        assert line.address.call("tally", {}, b"x" * 1000) == ({}, b"")
    assert MAX_HEADER + 1 not in sizes and 1001 not in sizes


def test_a_silent_or_slow_connection_is_closed_within_the_short_deadline(monkeypatch: pytest.MonkeyPatch) -> None:
    import etlstage.spark.driver_line as line_module

    assert AUTH_DEADLINE <= 10  # the default: short
    deadline = 1.5
    monkeypatch.setattr(line_module, "AUTH_DEADLINE", deadline)
    with DriverLine({}) as line:
        started = time.monotonic()
        with socket.create_connection(("127.0.0.1", line.address.port)) as silent:
            assert _closed_within(silent, deadline + 5) == b""
        assert time.monotonic() - started < deadline + 1
        started = time.monotonic()
        with socket.create_connection(("127.0.0.1", line.address.port)) as slow:  # a byte now and then
            slow.settimeout(0.2)
            with contextlib.suppress(OSError):
                for byte in line.token.encode():
                    slow.sendall(bytes([byte]))
                    with contextlib.suppress(socket.timeout):
                        if slow.recv(1) == b"":
                            break
            assert time.monotonic() - started < deadline + 1  # the deadline is for the token, not per byte


def test_connections_beyond_the_cap_are_refused_and_good_clients_still_get_through(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import etlstage.spark.driver_line as line_module

    monkeypatch.setattr(line_module, "AUTH_DEADLINE", 1.0)
    threads_before = threading.active_count()
    with DriverLine({"tally": lambda h, p: ({"n": len(p)}, b"")}, max_connections=4) as line:
        port = line.address.port
        held = [socket.create_connection(("127.0.0.1", port)) for _ in range(4)]
        wait_for(lambda: line.active == 4, 5, "the four silent connections to be served")
        with socket.create_connection(("127.0.0.1", port)) as fifth:
            assert b'"busy"' in _closed_within(fifth, 5)  # answered at once, by no thread of its own
        assert threading.active_count() <= threads_before + 1 + 4
        started = time.monotonic()
        assert line.address.call("tally", {}, b"abc") == ({"n": 3}, b"")  # once a thread is free again
        assert time.monotonic() - started < 5
        for sock in held:
            sock.close()


def test_the_driver_line_listens_on_the_address_the_executors_need_not_every_interface() -> None:
    from etlstage.spark.driver.run import _line_places, listen_address

    class Conf:
        def __init__(self, values: dict[str, str]) -> None:
            self.values = values

        def get(self, key: str, default: str = "") -> str:
            return self.values.get(key, default)

    class Session:
        def __init__(self, values: dict[str, str]) -> None:
            self.conf = Conf(values)

    assert _line_places(Session({"spark.master": "local[2]"})) == ("127.0.0.1", "127.0.0.1")  # type: ignore[arg-type]
    cluster = Session({"spark.master": "spark://m:7077", "spark.driver.host": "localhost"})
    assert _line_places(cluster) == ("127.0.0.1", "localhost")  # type: ignore[arg-type]
    bound = Session({"spark.master": "yarn", "spark.driver.host": "d", "spark.driver.bindAddress": "10.1.2.3"})
    assert _line_places(bound) == ("10.1.2.3", "d")  # type: ignore[arg-type]
    assert listen_address("localhost") == "127.0.0.1"
    with DriverLine({}, bind="127.0.0.1") as line:
        assert line._server.server_address[0] == "127.0.0.1"
