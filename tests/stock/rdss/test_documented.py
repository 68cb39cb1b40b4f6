"""Promises of docs/workers/rdss.md: `etlstage-rdss check`, --log-messages, --syslog-address,
and an earlier errorCode quoted in the new description."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from .conftest import compact, fresh, run_batches
from .test_subprocess import finish, read_until_eop, send, spawn

pytestmark = pytest.mark.timeout(60)


def rdss_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "etlstage_workers.rdss", *args], capture_output=True, text=True, timeout=30
    )


def test_check_prints_a_verdict_per_file_and_exits_by_the_worst(tmp_path: Path) -> None:
    good, bad, missing = tmp_path / "good.json", tmp_path / "bad.json", tmp_path / "missing.json"
    good.write_bytes(compact(fresh()))
    bad.write_bytes(b'{"messageHeader": ')
    r = rdss_cli("check", str(good), str(bad))
    assert r.returncode == 1, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == f"{good}: valid"
    assert lines[1].startswith(f"{bad}: GENERR007 ") and len(lines) == 2
    assert rdss_cli("check", str(good)).returncode == 0
    r = rdss_cli("check", str(good), str(missing))
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert f"{missing}: cannot read: No such file or directory" in r.stderr
    assert r.stdout == f"{good}: valid\n"


@pytest.mark.parametrize("log_messages", [True, False])
def test_log_messages_logs_every_message_received(tmp_path: Path, log_messages: bool) -> None:
    docs = [fresh() for _ in range(3)]
    p = spawn(tmp_path, "batch", 3, "supervisor", *(["--log-messages"] if log_messages else []))
    send(p, b"".join(compact(d) + b"\n" for d in docs) + b"\x17")
    read_until_eop(p)
    received = [line for line in finish(p).decode().splitlines() if "Message received:" in line]
    if log_messages:
        assert [d["messageHeader"]["messageId"] for d in docs] == [line.split()[-3] for line in received]
    else:
        assert received == []


def test_syslog_address_sends_the_lines_there_not_to_stderr(tmp_path: Path) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.bind(("127.0.0.1", 0))
        sock.settimeout(20)
        port = sock.getsockname()[1]
        p = spawn(
            tmp_path, "single", 1, "supervisor", "--log-format", "syslog", "--syslog-address", f"udp://127.0.0.1:{port}"
        )
        send(p, b"not json\n")
        read_until_eop(p)
        lines = []
        while not any("GENERR007" in line for line in lines):
            lines.append(sock.recv(65536).decode())
        stderr = finish(p).decode()
    warning = next(line for line in lines if "GENERR007" in line)
    assert warning.startswith("<132>1 ") and "etlstage-rdss-" in warning and "[WARNING] Message" in warning
    assert "GENERR007" not in stderr


def test_an_earlier_error_code_is_quoted_in_the_new_description(tmp_path: Path) -> None:
    doc: dict[str, Any] = fresh()
    doc["messageHeader"].update(priority=1, errorCode="GENERR001", errorDescription="body rejected upstream")
    same = fresh()
    same["messageHeader"].update(priority=1, errorCode="GENERR004", errorDescription="seen before")
    [result, again] = run_batches([[compact(doc), compact(same)]], tmp_path / "state")
    header = result["messageHeader"]
    assert header["errorCode"] == "GENERR004"
    assert header["errorDescription"].endswith(
        " (the message already carried errorCode 'GENERR001': 'body rejected upstream')"
    )
    assert "already carried" not in again["messageHeader"]["errorDescription"]  # the same code: nothing to quote
    assert json.dumps(header).isascii()
