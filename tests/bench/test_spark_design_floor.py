"""bench/workers/spark_design_floor_job.py plans whole lines: every micro-batch ends at a
line's end and its tasks' byte ranges cover it exactly, each from a line's start (a cut
inside a line would count one line twice or split it in two)."""

from __future__ import annotations

import itertools
import sys

from tests.support.paths import ROOT

sys.path.insert(0, str(ROOT))
from bench.workers.spark_design_floor_job import RangeReader, line_end


def test_micro_batches_and_their_ranges_cover_the_file_in_whole_lines(tmp_path):
    lines = [b"%d%s\n" % (i, b"x" * (i % 7)) for i in range(1000)]  # lines of unequal length
    path = tmp_path / "lines.txt"
    path.write_bytes(b"".join(lines))
    starts = {0}
    for line in lines:
        starts.add(max(starts) + len(line))
    size = path.stat().st_size
    reader = RangeReader(str(path), 3, 1000)
    offset, covered = reader.initialOffset(), []
    while offset["pos"] < size:
        end = reader.latestOffset(offset, None)
        assert end["pos"] in starts and end["pos"] > offset["pos"]
        ranges = [p.value for p in reader.partitions(offset, end)]
        assert all(a in starts and b in starts for a, b in ranges)
        covered += ranges
        offset = end
    assert [r for pair in covered for r in pair] == sorted(r for pair in covered for r in pair)  # in order
    assert covered[0][0] == 0 and covered[-1][1] == size
    assert all(a[1] == b[0] for a, b in itertools.pairwise(covered))  # no gap, no overlap


def test_a_position_inside_a_line_moves_to_the_next_lines_start(tmp_path):
    path = tmp_path / "lines.txt"
    path.write_bytes(b"abc\ndefg\nh\n")
    size = 11
    assert [line_end(str(path), pos, size) for pos in range(12)] == [0, 4, 4, 4, 4, 9, 9, 9, 9, 9, 11, 11]
