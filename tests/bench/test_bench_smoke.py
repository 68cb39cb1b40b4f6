"""Every benchmark script runs as docs/performance*.md shows it, at tiny sizes: the commands
keep working (the figures themselves are measured by hand, never asserted here)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.support.paths import ROOT

pytestmark = [pytest.mark.slow, pytest.mark.timeout(540)]

# Seconds a script may take. Those that start several JVMs (lake.py three, spark_floor.py
# three, jit_steady.py two with Spark's full JIT) took 105-180 s on a machine whose CPU was
# slower by half than the day before (2026-12-04): a bound is a hang's limit, not a target.
BOUND_S = {"lake.py": 480, "spark_floor.py": 480, "jit_steady.py": 480}

# script, tiny-size arguments, a line of its report that shows it ran through
SMOKE = [
    ("core_pipeline.py", ["--n", "2000", "--repeat", "1", "--skip-rss"], "etlstage run, batch"),
    ("example_workers.py", ["--messages", "2000", "--batch", "100"], "python (SDK)"),
    ("kcl_vs_marker.py", ["--records", "2000", "--batch", "100"], "marker protocol is"),
    ("rdss_validate.py", ["--count", "200", "--batch", "100"], "worker, batches of 100"),
    ("spark_parse.py", ["--messages", "2000", "--runs", "1"], "pyarrow.json (loader)"),
    ("kinesis_extractor.py", ["--shards", "2", "--records", "400", "--size", "100", "--runs", "1"], "records/s"),
    (
        "spark_load.py",
        ["--messages", "2000", "--batch", "1000", "--master", "local[1]"],
        "etlstage-spark-load replay (all dups)",
    ),
    ("sdk_throughput.py", ["--n", "2000", "--repeat", "1"], "SDK / by hand"),
    ("jit_steady.py", ["--n", "200", "--batches", "2"], "-XX:TieredStopAtLevel=1"),
    ("lake.py", ["--tables", "--rounds", "1", "--cold", "1", "--small", "300"], "at once (loader)"),
    ("kafka.py", ["--records", "2000", "--runs", "1"], "extractor / bare consume: best"),
    # the suite's JIT and class archives (tests/support/jvm_settings.py): the same programs, less CPU
    (
        "spark_floor.py",
        ["--rounds", "1", "--count", "5", "--jvm-as-is"],
        "the engine's own share before the first record",
    ),
    ("spark_engine.py", ["--repeat", "1", "--sizes", "2000x100", "--cycles", "0"], "of the supervisor: wall"),
    # one engine arm (x2: both instances of a stage), the design floor and pipe: the x1 and chain arms
    # run the same code with other stage keys (two Spark jobs more)
    (
        "spark_pipe.py",
        ["--n", "2000", "--repeat", "1", "--no-supervisor", "--instances", "2", "--no-chain"],
        "x (rep 1)",
    ),
]


@pytest.mark.parametrize(("script", "args", "shows"), SMOKE, ids=[s[0] for s in SMOKE])
def test_benchmark_runs_at_tiny_sizes(script: str, args: list[str], shows: str, tmp_path) -> None:
    if script == "spark_load.py":
        args = [*args, "--dir", str(tmp_path)]
    r = subprocess.run(
        [sys.executable, str(ROOT / "bench" / script), *args],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=BOUND_S.get(script, 180),
    )
    assert r.returncode == 0, r.stderr[-3000:]
    assert shows in r.stdout, r.stdout[-3000:]
