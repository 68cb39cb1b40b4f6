"""Kill any process at any moment, restart, and every record still arrives (docs/protocol.md: windows).

Each run kills, with SIGKILL at seeded random moments, the supervisor or one of its
workers, at least 20 times, restarting `etlstage run --once` whenever the supervisor
died.  A failure names its seed: ETLSTAGE_CRASH_SEED=<seed> reproduces it.
"""

from __future__ import annotations

import collections
import os
import random
import signal
import subprocess
import time

import psutil
import pytest

from tests.support.run_cli import RUN_ONCE

N = 10_000  # long enough that KILLS kills land before the run ends, even on a fast day (they take ~5 s)
KILLS = 20


def expected_keys(n: int) -> list[str]:
    out = []
    for i in range(n):
        k = i % 3
        out += [] if k == 0 else [f"{i}a", f"{i}b"] if k == 1 else [str(i)]
    return out


def pipeline(offsets: str, loader: str) -> str:
    if offsets == "worker":
        source = 'mode: cyclic, command: ["{PY}", "{TW}", count, "%d", "50"]' % N
    else:
        source = (
            "mode: cyclic, offsets: supervisor, offset_policy: {type: counter, start: 0, step: 50}, "
            'command: ["{PY}", "{TW}", count, "%d"]' % N
        )
    return f"""
        max_inflight_windows: 3
        defaults: {{restart: {{max_restarts: 1000, backoff: 0.05, backoff_max: 0.2}}}}
        stages:
          - {{name: src, type: E, {source}}}
          - {{name: fan, type: T, mode: batch, batch_size: 64, command: ["{{PY}}", "{{TW}}", fanout]}}
          - {{name: sink, type: L, mode: batch, batch_size: 100, batch_driver: worker,
              command: ["{{PY}}", "{{TW}}", {loader}, out.txt]}}
    """


def crash_run(pdir, seed: int) -> tuple[int, collections.Counter[str]]:
    rng = random.Random(seed)
    kills = 0
    cmd = RUN_ONCE
    deadline = time.time() + 240
    log = open(pdir.path / "supervisor.log", "ab")
    while time.time() < deadline:
        proc = subprocess.Popen(cmd, cwd=pdir.path, stdout=log, stderr=log)
        while proc.poll() is None and kills < KILLS:
            time.sleep(rng.uniform(0.02, 0.25))
            if proc.poll() is not None:
                break
            workers = [p for p in psutil.Process(proc.pid).children() if "tw.py" in " ".join(p.cmdline())]
            if rng.random() < 0.3 or not workers:
                os.kill(proc.pid, signal.SIGKILL)
            else:
                victim = rng.choice(workers)
                try:
                    victim.kill()
                except psutil.NoSuchProcess:
                    continue
            kills += 1
        if kills >= KILLS:
            code = proc.wait(timeout=240)
            if code == 0:
                break
            if code != -signal.SIGKILL:
                raise AssertionError(f"seed {seed}: etlstage run exited {code}; see {pdir.path}/supervisor.log")
        else:
            proc.wait(timeout=60)
        if proc.returncode == 0:
            break
    else:
        raise AssertionError(f"seed {seed}: did not finish in time")
    if proc.returncode != 0:  # the last kill hit the supervisor: a clean run finishes the job
        assert subprocess.run(cmd, cwd=pdir.path, stdout=log, stderr=log, timeout=240).returncode == 0
    return kills, collections.Counter(pdir.lines("out.txt"))


SEED = int(os.environ.get("ETLSTAGE_CRASH_SEED", "20261122"))


@pytest.mark.slow  # over 10 s
@pytest.mark.parametrize("offsets", ["worker", "supervisor"])
def test_idempotent_loader_gets_every_key_exactly_once_despite_kills(pdir, offsets):
    pdir.write(pipeline(offsets, "idem"))
    kills, got = crash_run(pdir, SEED + (offsets == "supervisor"))
    assert kills >= KILLS
    expected = collections.Counter(expected_keys(N))
    missing = expected - got
    assert not missing, f"seed {SEED}: {len(missing)} keys lost, e.g. {list(missing)[:5]}"
    assert got == expected, f"seed {SEED}: duplicates {[(k, c) for k, c in got.items() if c > 1][:5]}"


@pytest.mark.slow  # over 10 s
def test_plain_loader_may_see_duplicates_but_never_loses(pdir):
    pdir.write(pipeline("worker", "append"))
    kills, got = crash_run(pdir, SEED + 7)
    assert kills >= KILLS
    missing = collections.Counter(expected_keys(N)) - got
    assert not missing, f"seed {SEED + 7}: {len(missing)} keys lost, e.g. {list(missing)[:5]}"
