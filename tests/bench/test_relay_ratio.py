"""The supervisor's relay against a shell pipe of the same three programs (E → pass-through
T → L, bench/core_pipeline.py's rows at a size CI runs in seconds): a ratio of the two,
each the best of a few runs taken in turn, never an absolute time. The limits leave room
for a machine shared with other jobs; a relay that slows clearly (a fixed wait at start,
a copy or a scan per message) goes over them. docs/performance.md, *Keeping it from
sliding*, gives the figures they were set from."""

from __future__ import annotations

import importlib.util
import resource
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest

from tests.support.paths import ROOT

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

ROUNDS = 3  # each of the two runs this many times, in turn: the best of each is compared
CPU_100B, WALL_100B, CPU_64K, WALL_64K = 3.0, 4.0, 1.8, 4.0  # from 2.09, 2.65, 1.28, 2.81 at load 20


def core_pipeline() -> ModuleType:
    spec = importlib.util.spec_from_file_location("core_pipeline", ROOT / "bench" / "core_pipeline.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def cpu_seconds(run: Callable[[], object]) -> float:
    """User + system CPU of the processes ``run`` starts and reaps (every worker included)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    run()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime


# messages, bytes each, batch size; the most the supervisor may take of the pipe's CPU and
# of its wall time (the CPU a machine's other load barely moves; the wall time it does,
# hence the wider limit: it is there for idle time, a wait the CPU does not show)
CASES = {
    "100 B, batch 1000": (1_000_000, 100, 1000, CPU_100B, WALL_100B),
    "64 KiB, batch 16": (3_200, 65536, 16, CPU_64K, WALL_64K),
}


@pytest.mark.parametrize("case", CASES)
def test_the_relay_keeps_within_its_ratio_of_the_shell_pipe(case: str, tmp_path: Path) -> None:
    n, size, batch, cpu_limit, wall_limit = CASES[case]
    bench = core_pipeline()
    cpu: dict[str, list[float]] = {"pipe": [], "etlstage": []}
    wall: dict[str, list[float]] = {"pipe": [], "etlstage": []}
    runs = {
        "pipe": lambda: bench.shell_baseline(tmp_path, n, size, batch),
        "etlstage": lambda: bench.supervised(tmp_path, n, size, "batch", batch)[0],
    }
    for _ in range(ROUNDS):  # in turn: a change in the machine's load falls on both alike
        for name, run in runs.items():
            t0 = time.perf_counter()
            cpu[name].append(cpu_seconds(run))
            wall[name].append(time.perf_counter() - t0)
    cpu_ratio = min(cpu["etlstage"]) / min(cpu["pipe"])
    wall_ratio = min(wall["etlstage"]) / min(wall["pipe"])
    said = (
        f"{case}, {n:,} messages, best of {ROUNDS} each: CPU {min(cpu['etlstage']):.3f} s against the shell pipe's "
        f"{min(cpu['pipe']):.3f} s ({cpu_ratio:.2f}x, at most {cpu_limit}x), wall {min(wall['etlstage']):.3f} s "
        f"against {min(wall['pipe']):.3f} s ({wall_ratio:.2f}x, at most {wall_limit}x)"
    )
    print(said)
    assert cpu_ratio <= cpu_limit and wall_ratio <= wall_limit, said
