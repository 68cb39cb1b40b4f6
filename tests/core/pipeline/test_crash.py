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

from tests.support.processes import live_command
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


def crash_run(pdir, seed: int, victims: tuple[str, ...] = ("tw.py",)) -> tuple[int, collections.Counter[str]]:
    """Kill the supervisor, or a worker whose command line holds one of ``victims``, at
    seeded random moments, KILLS times in all, rerunning the supervisor each time it died."""
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
            workers = [p for p in psutil.Process(proc.pid).children() if _named(p, victims)]
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


def _named(process: psutil.Process, victims: tuple[str, ...]) -> bool:
    command = live_command(process)
    return command is not None and any(v in command for v in victims)


SEED = int(os.environ.get("ETLSTAGE_CRASH_SEED", "20261122"))


def assert_every_key_once(got: collections.Counter[str], seed: int | None) -> None:
    """Every key of the run loaded, none twice; a failure names the seed that reproduces it."""
    expected = collections.Counter(expected_keys(N))
    missing = expected - got
    assert not missing, f"seed {seed}: {len(missing)} keys lost, e.g. {list(missing)[:5]}"
    assert got == expected, f"seed {seed}: duplicates {[(k, c) for k, c in got.items() if c > 1][:5]}"


@pytest.mark.slow  # over 10 s
@pytest.mark.parametrize("offsets", ["worker", "supervisor"])
def test_idempotent_loader_gets_every_key_exactly_once_despite_kills(pdir, offsets):
    pdir.write(pipeline(offsets, "idem"))
    kills, got = crash_run(pdir, SEED + (offsets == "supervisor"))
    assert kills >= KILLS
    assert_every_key_once(got, SEED)


@pytest.mark.slow  # over 10 s
def test_plain_loader_may_see_duplicates_but_never_loses(pdir):
    pdir.write(pipeline("worker", "append"))
    kills, got = crash_run(pdir, SEED + 7)
    assert kills >= KILLS
    missing = collections.Counter(expected_keys(N)) - got
    assert not missing, f"seed {SEED + 7}: {len(missing)} keys lost, e.g. {list(missing)[:5]}"


def kill_the_supervisor_then_run_again(pdir, flag) -> None:
    """Run the pipeline, SIGKILL the supervisor as soon as ``flag`` exists (the loader made
    it once a batch was committed and before it acknowledged it: the batch's window is not
    committed), then run it again to the end."""
    proc = subprocess.Popen(RUN_ONCE, cwd=pdir.path, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 120
        while not flag.exists():
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
            assert time.monotonic() < deadline, "no batch was committed"
            time.sleep(0.01)
        os.kill(proc.pid, signal.SIGKILL)  # the batch is committed; its window is not
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    again = subprocess.run(RUN_ONCE, cwd=pdir.path, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr[-3000:]


def ledger_pipeline(linger: float) -> str:
    """Supervisor offsets (a window asked again is the same range), one window at a time and
    the loader's batches closed by size or by the window's end (``linger`` long): after the
    supervisor dies, a window extracted again is cut into the batches it was cut into."""
    return f"""
        max_inflight_windows: 1
        defaults: {{restart: {{max_restarts: 1000, backoff: 0.05, backoff_max: 0.2}}}}
        stages:
          - {{name: src, type: E, mode: cyclic, offsets: supervisor,
              offset_policy: {{type: counter, start: 0, step: 50}}, command: ["{{PY}}", "{{TW}}", count, "{N}"]}}
          - {{name: fan, type: T, mode: batch, batch_size: 64, command: ["{{PY}}", "{{TW}}", fanout]}}
          - {{name: sink, type: L, mode: batch, batch_size: 100, batch_id: true, linger: {linger},
              command: ["{{PY}}", "{{TW}}", ledger, out]}}
    """


@pytest.mark.slow  # over 10 s
def test_a_loader_committing_by_batch_id_loads_every_key_once_when_any_process_dies(pdir):
    """docs/protocol.md, batch ids: a loader that commits each batch with its id (FileSink,
    the SDKs' helper) loads nothing twice under the kill matrix, the supervisor's death
    included, where a window extracted again re-forms the same batches."""
    from etlstage.worker.idempotent import FileSink

    pdir.write(ledger_pipeline(linger=60))
    kills, _ = crash_run(pdir, SEED + 11)
    assert kills >= KILLS
    assert_every_key_once(collections.Counter(m.decode() for m in FileSink(pdir.path / "out").lines()), SEED + 11)


@pytest.mark.slow  # over 10 s
def test_a_batch_committed_when_the_supervisor_died_is_skipped_by_its_id_in_the_next_run(pdir):
    """The supervisor SIGKILLed after the loader committed a batch and before the window
    committed: the next run extracts the window again, re-forms the same batch, gives it
    the same id, and the loader skips it.  Nothing is loaded twice (an id that changed
    between runs would load the batch again)."""
    from etlstage.worker.idempotent import FileSink

    flag = pdir.path / "committed.flag"
    pdir.write(ledger_pipeline(linger=60).replace("ledger, out]", f'ledger, out, "{flag}", "5"]'))
    kill_the_supervisor_then_run_again(pdir, flag)
    assert_every_key_once(collections.Counter(m.decode() for m in FileSink(pdir.path / "out").lines()), None)
    ids = (pdir.path / "out" / "ids.log").read_text().splitlines()
    assert any(line.endswith(" skipped") for line in ids), ids[:5]  # the re-formed batch, by its id
