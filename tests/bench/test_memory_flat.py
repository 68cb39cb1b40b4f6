"""The supervisor's memory does not grow with the number of messages (docs/performance.md:
peak RSS flat, target <= 100 MB), checked at N and 10 N with the benchmark's own pipeline
and RSS sampling.  The windows are of one size at both counts: what a window holds until
it closes (a few hundred bytes per batch) is bounded by the window, not by the run."""

from __future__ import annotations

import importlib.util

import pytest

from tests.support.paths import ROOT

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

MB = 1_000_000
N = 300_000  # the supervisor's buffers reach their bounded size by then
WINDOW = 30_000


def core_pipeline():  # bench/ is a folder of scripts, not a package
    spec = importlib.util.spec_from_file_location("core_pipeline", ROOT / "bench" / "core_pipeline.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_supervisor_peak_rss_is_flat_from_n_to_10n_messages(tmp_path) -> None:
    bench = core_pipeline()
    _, rss_n = bench.supervised(tmp_path, N, 100, "batch", 1000, cyclic=True, per_cycle=WINDOW)
    _, rss_10n = bench.supervised(tmp_path, 10 * N, 100, "batch", 1000, cyclic=True, per_cycle=WINDOW)
    print(f"supervisor peak RSS: {rss_n / MB:.0f} MB at {N:,} messages, {rss_10n / MB:.0f} MB at {10 * N:,}")
    assert rss_10n <= 100 * MB
    # 270 MB more went through: holding even a fiftieth of it would show
    assert rss_10n - rss_n <= 5 * MB, (rss_n, rss_10n)
