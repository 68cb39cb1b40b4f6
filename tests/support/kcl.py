"""Helpers for the KCL adapter tests: the real amazon_kclpy sdist, and a runner that
drives ``python -m etlstage_workers.kcl`` as a subprocess with marker-protocol bytes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from etlstage.protocol.scenario import Scenario
from etlstage.protocol.vocabulary import BatchDriver, Mode, StageType
from tests.support.downloads import fetch_kclpy
from tests.support.paths import FIXTURES, ROOT

CHILDREN = FIXTURES / "kcl_children"
EOM, EOP, EOB, BNC = b"\n", b"\x00", b"\x17", b"\x11"


def kclpy_dir() -> Path:
    """The unmodified ``amazon_kclpy/`` package from its PyPI sdist (tests/support/downloads.py)."""
    try:
        return fetch_kclpy()
    except RuntimeError as exc:
        pytest.fail(str(exc))


@dataclass
class Run:
    returncode: int
    stdout: bytes
    stderr: str
    out_lines: list[str]

    def records(self) -> list[list[str]]:
        """RECORD lines split: shard, seq, subseq, partitionKey, arrival, data."""
        return [line.split(" ", 6)[1:] for line in self.out_lines if line.startswith("RECORD ")]

    def events(self, name: str | None = None) -> list[list[str]]:
        ev = [line.split(" ")[1:] for line in self.out_lines if line.startswith("EVENT ")]
        return [e for e in ev if name is None or e[0] == name]


def batches_to_bytes(batches: list[list[bytes]]) -> bytes:
    """Supervisor-driven batches: messages, each ending with EOM, each batch closed by EOB."""
    return b"".join(b"".join(m + EOM for m in batch) + EOB for batch in batches)


def run_adapter(
    tmp_path: Path,
    child: list[str],
    stdin: bytes,
    *,
    adapter_args: list[str] = (),
    stage_type: str = "T",
    mode: str = "batch",
    batch_size: int = 100,
    batch_driver: str = "supervisor",
    env: dict[str, str] | None = None,
    timeout: float = 120,
    kclpy: Path | None = None,
) -> Run:
    out = tmp_path / "processor-out.txt"
    state = tmp_path / "state"
    state.mkdir(exist_ok=True)
    pythonpath = [str(ROOT)] + ([str(kclpy)] if kclpy else [])
    scenario = Scenario(StageType(stage_type), Mode(mode), batch_size, BatchDriver(batch_driver), stage="kcl")
    full_env = {
        **os.environ,
        **scenario.to_env(),
        "PYTHONPATH": os.pathsep.join(pythonpath),
        "ETLSTAGE_STATE_DIR": str(state),
        "KCL_TEST_OUT": str(out),
    }
    full_env.update(env or {})
    argv = [sys.executable, "-m", "etlstage_workers.kcl", *adapter_args, "--", *child]
    done = subprocess.run(argv, check=False, input=stdin, env=full_env, capture_output=True, timeout=timeout, cwd=ROOT)
    lines = out.read_text().splitlines() if out.exists() else []
    return Run(done.returncode, done.stdout, done.stderr.decode("utf-8", "replace"), lines)


def envelope(shard: str, seq: int, data: str, **extra: object) -> bytes:
    doc = {
        "shardId": shard,
        "sequenceNumber": f"{seq:056d}",
        "subSequenceNumber": 0,
        "partitionKey": f"pk-{seq % 7}",
        "approximateArrivalTimestamp": 1700000000000 + seq,
        "data": data,
    }
    doc.update(extra)
    return json.dumps(doc).encode()


def shard_end(shard: str) -> bytes:
    return json.dumps({"shardId": shard, "shardEnded": True}).encode()


def node() -> str:
    return "node"
