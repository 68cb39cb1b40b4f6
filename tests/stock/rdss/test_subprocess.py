"""The worker as a real subprocess speaking the protocol: single, batch (supervisor- and
worker-driven), SIGKILL between the parts of a sequence, syslog logging."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from etlstage.protocol.scenario import Scenario

from .conftest import compact, fresh, split_message

ROOT = Path(__file__).resolve().parents[3]


def spawn(
    state: Path, mode: str, batch_size: int = 1, driver: str = "supervisor", *args: str
) -> subprocess.Popen[bytes]:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    env.update(
        Scenario(
            type="T", mode=mode, batch_size=batch_size, batch_driver=driver, stage="rdss", state_dir=str(state)
        ).to_env()
    )
    return subprocess.Popen(
        [sys.executable, "-m", "etlstage_workers.rdss", *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )


def read_until_eop(p: subprocess.Popen[bytes], timeout: float = 30) -> bytes:
    assert p.stdout is not None
    buf = b""
    deadline = time.monotonic() + timeout
    while not buf.endswith(b"\x00"):
        assert time.monotonic() < deadline, f"no EOP; got {buf[-200:]!r}"
        chunk = os.read(p.stdout.fileno(), 1 << 16)
        assert chunk, f"worker exited: {p.wait()} {p.stderr.read() if p.stderr else b''!r}"
        buf += chunk
    return buf


def send(p: subprocess.Popen[bytes], data: bytes) -> None:
    assert p.stdin is not None
    p.stdin.write(data)
    p.stdin.flush()


def results(buf: bytes) -> list[dict[str, Any]]:
    return [json.loads(m) for m in buf.rstrip(b"\x00").split(b"\n") if m]


def finish(p: subprocess.Popen[bytes]) -> bytes:
    assert p.stdin is not None and p.stderr is not None
    p.stdin.close()
    assert p.wait(timeout=30) == 0
    return p.stderr.read()


@pytest.mark.timeout(60)
def test_single_mode(tmp_path: Path) -> None:
    p = spawn(tmp_path, "single")
    send(p, compact(fresh()) + b"\n")
    [r] = results(read_until_eop(p))
    assert "errorCode" not in r["messageHeader"]
    send(p, b"{broken\n")
    [r] = results(read_until_eop(p))
    assert r["messageHeader"]["errorCode"] == "GENERR007"
    finish(p)


@pytest.mark.timeout(60)
def test_batch_supervisor_driven(tmp_path: Path) -> None:
    p = spawn(tmp_path, "batch", 3)
    send(p, compact(fresh()) + b"\n" + b"nope\n" + compact(fresh()) + b"\n\x17")
    out = results(read_until_eop(p))
    assert [r["messageHeader"].get("errorCode") for r in out] == [None, "GENERR007", None]
    finish(p)


@pytest.mark.timeout(60)
def test_batch_worker_driven(tmp_path: Path) -> None:
    p = spawn(tmp_path, "batch", 2, "worker")
    assert p.stdout is not None
    send(p, compact(fresh()) + b"\n")
    assert os.read(p.stdout.fileno(), 1) == b"\x11"  # BNC: send more
    send(p, compact(fresh()) + b"\n")
    assert len(results(read_until_eop(p))) == 2
    finish(p)


@pytest.mark.timeout(120)
def test_sigkill_between_parts_loses_nothing(tmp_path: Path) -> None:
    doc = fresh()
    parts = split_message(doc, 4)
    for part in (parts[3], parts[1], parts[0]):
        p = spawn(tmp_path, "single")
        send(p, part + b"\n")
        assert read_until_eop(p) == b"\x00"  # acknowledged: stored, nothing to emit yet
        p.send_signal(signal.SIGKILL)
        p.wait(timeout=30)
    p = spawn(tmp_path, "single")
    send(p, parts[2] + b"\n")
    [whole] = results(read_until_eop(p))
    finish(p)
    assert whole["messageBody"] == doc["messageBody"]
    assert whole["messageHeader"]["messageId"] == json.loads(parts[0])["messageHeader"]["messageId"]


@pytest.mark.timeout(60)
def test_syslog_lines_follow_rfc5424(tmp_path: Path) -> None:
    p = spawn(tmp_path, "single", 1, "supervisor", "--log-format", "syslog")
    send(p, b"not json\n")
    read_until_eop(p)
    lines = finish(p).decode().splitlines()
    warning = next(line for line in lines if "GENERR007" in line)
    pri, rest = warning.split(">", 1)
    assert pri == "<132" and rest.startswith("1 ")  # local0 (16) * 8 + warning (4)
    assert "etlstage-rdss-" in warning and "[WARNING] Message" in warning
    assert warning.count("[WARNING]") == 1, warning  # the level once, by the formatter


@pytest.mark.timeout(60)
def test_two_instances_share_the_ldr(tmp_path: Path) -> None:
    doc = fresh()
    parts = split_message(doc, 2)
    a, b = spawn(tmp_path, "single"), spawn(tmp_path, "single")
    send(a, parts[1] + b"\n")
    assert read_until_eop(a) == b"\x00"
    send(b, parts[0] + b"\n")
    [whole] = results(read_until_eop(b))
    assert whole["messageBody"] == doc["messageBody"]
    finish(a)
    finish(b)
