"""The supervisor's memory is bounded in bytes, whatever the size of a message."""

from __future__ import annotations

import resource
import subprocess

from tests.support.run_cli import RUN_ONCE

MIB = 1 << 20
LIMIT = 500 * MIB  # address space: the supervisor's (and each worker's, inherited) ceiling


def limit_address_space() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (LIMIT, LIMIT))


def test_one_mib_messages_in_batches_of_1000_run_under_a_500_mb_address_space(pdir):
    """256 messages of 1 MiB with batch_size 1000: a batch closes at batch_bytes, and what a
    stage holds for sending again stays within replay_bytes (the code before held whole
    batches of 256 MiB, twice per stage, and died of MemoryError under this limit)."""
    message = b"y" * (MIB - 1) + b"\n"
    (pdir.path / "big.bin").write_bytes(message * 256)
    pdir.write("""
        stages:
          - {name: src, type: E, command: [cat, big.bin]}
          - {name: t, type: T, mode: batch, batch_size: 1000, command: ["{PY}", "{TW}", pass]}
          - {name: sink, type: L, mode: batch, batch_size: 1000, command: ["{PY}", "{TW}", append, out.txt]}
    """)
    r = subprocess.run(
        RUN_ONCE, cwd=pdir.path, capture_output=True, text=True, timeout=300, preexec_fn=limit_address_space
    )
    assert r.returncode == 0, r.stderr[-2000:]
    out = pdir.path / "out.txt"
    assert out.stat().st_size == 256 * MIB
    with out.open("rb") as f:
        assert all(len(line) == MIB for line in f)
