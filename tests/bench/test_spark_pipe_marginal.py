"""bench/spark_pipe.py --marginal: the steady rate is taken between two sizes, start-up left out."""

from __future__ import annotations

import sys

from tests.support.paths import ROOT

sys.path.insert(0, str(ROOT))
from bench.spark_pipe import Measured, marginal


def test_the_rate_between_two_sizes_leaves_the_start_up_out() -> None:
    # 5 s of start-up in both runs; 10^6 more messages took 2 s more
    small = Measured(wall=20.0, alone=7.0, used=10.0, count=1_000_000)
    large = Measured(wall=22.0, alone=9.0, used=14.0, count=2_000_000)
    assert marginal(small, large) == 500_000.0
    assert small.count / small.alone < 150_000  # the one-size rate, start-up in


def test_a_report_line_shows_both_rates_and_the_cpu() -> None:
    line = Measured(wall=10.0, alone=4.0, used=12.5, count=2_000_000).line("spark engine", "0.50x")
    assert line.split()[:3] == ["spark", "engine", "200,000"]
    assert "500,000" in line and "12.5" in line and line.endswith("0.50x")
