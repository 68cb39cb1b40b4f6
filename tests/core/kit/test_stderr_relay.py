"""A worker's stderr is relayed within bounds (kit/stderr.py, both engines): long lines cut,
lines past the per-second budget counted and summed up in one line, never a flood in the log."""

from __future__ import annotations

import collections
import os
import re
import sys
import time

from etlstage.kit.stderr import StderrRelay
from etlstage.spark.tasks.process import WorkerProcess
from tests.support.waiting import wait_for


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def relay(per_second: int = 3, max_line: int = 10) -> tuple[StderrRelay, list[str], Clock]:
    shown: list[str] = []
    clock = Clock()
    r = StderrRelay(collections.deque(maxlen=5), shown.append, max_line=max_line, per_second=per_second, clock=clock)
    return r, shown, clock


def test_lines_are_split_across_chunks_escaped_and_a_long_one_is_cut_saying_how_much():
    r, shown, _ = relay(per_second=100)
    r.feed(b"one\ntw")
    r.feed(b"o\r\n\x1b[31mred\nx" + b"y" * 30)
    r.feed(b"z" * 1000 + b"\nlast without end")
    r.close()
    assert shown == [
        "one",
        "two",
        "\\x1b[31mred",
        "xyyyyyyyyy ... (1,021 more bytes of this line not shown)",
        "last witho ... (6 more bytes of this line not shown)",
    ]
    assert list(r.tail) == shown


def test_past_the_budget_a_seconds_lines_are_counted_and_summed_up_in_one_line():
    r, shown, clock = relay(per_second=3)
    r.feed(b"".join(b"line %d\n" % i for i in range(10)))
    r.feed(b"a\nb\n")  # still the same second: counted
    assert shown == ["line 0", "line 1", "line 2"]
    clock.now += 1.0
    r.feed(b"next\n")
    assert shown[3:] == ["(9 stderr line(s), 53 bytes, not shown: more than 3 lines a second)", "next"]
    r.feed(b"x\ny\nz\nw\npartial")
    r.close()
    assert shown[5:] == ["x", "y", "(3 stderr line(s), 11 bytes, not shown: more than 3 lines a second)"]
    assert r.dropped_total == 12
    assert list(r.tail)[-1].startswith("(3 stderr line(s)")


def test_a_200_mb_flood_costs_little_and_shows_a_bounded_number_of_lines():
    r, shown, _ = relay(per_second=200, max_line=8192)
    chunk = b"warning: record skipped because its field was empty\n" * 1300  # ~64 KiB
    started = time.process_time()
    for _ in range(200 * 2**20 // len(chunk)):
        r.feed(chunk)
    r.close()
    took = time.process_time() - started
    assert len(shown) == 201 and shown[-1].startswith("(4,0"), shown[-1]
    assert took < 5, f"{took:.1f}s of CPU for 200 MB"  # bulk counting: well under a second unloaded


FLOOD = "import sys\nfor i in range(200000): sys.stderr.write('flood %d\\n' % i)\nsys.stderr.write('the end\\n')"


def test_the_spark_engines_worker_pipe_relays_through_the_same_bounds(capfd):
    worker = WorkerProcess([sys.executable, "-c", FLOOD], dict(os.environ), None, "flooder")
    wait_for(lambda: worker.proc.poll() is not None and not worker._stderr.is_alive(), 60, "the flood's end")
    err = capfd.readouterr().err.splitlines()
    relayed = [line for line in err if line.startswith("[flooder] ")]
    summaries = [SUMMARY.search(line) for line in relayed]
    dropped = sum(int(m[1].replace(",", "")) for m in summaries if m)
    assert dropped and len(relayed) < 20_000, len(relayed)  # a fraction of the flood, the rest counted
    assert len(relayed) - sum(1 for m in summaries if m) + dropped == 200_001  # every line shown or counted


SUMMARY = re.compile(r"\(([\d,]+) stderr line\(s\), [\d,]+ bytes, not shown")


FLOODING_T = """\
import os, sys
line = b"warning: " + b"x" * 90 + b"\\n"
for _ in range(200):  # 20 MB in 100 KB writes
    os.write(2, line * 1000)
os.write(2, b"y" * 100_000 + b"\\n")  # and one very long line
os.execv(sys.executable, [sys.executable, sys.argv[1], "pass"])
"""


def test_a_supervised_worker_flooding_stderr_neither_floods_the_log_nor_loses_the_run(pdir):
    (pdir.path / "flood.py").write_text(FLOODING_T)
    pdir.write(
        """
        stages:
          - {name: src, type: E, command: ["{PY}", "{TW}", count, "100"]}
          - {name: noisy, type: T, command: ["{PY}", flood.py, "{TW}"]}
          - {name: sink, type: L, command: ["{PY}", "{TW}", append, out.txt]}
        """
    )
    r = pdir.run("--once", timeout=120)
    assert r.code == 0, r.stderr[-3000:]
    assert len(pdir.lines("out.txt")) == 100
    noisy = [line for line in r.stderr.splitlines() if "[noisy]" in line]
    counted = sum(int(m[1].replace(",", "")) for m in map(SUMMARY.search, noisy) if m)
    assert counted and len(r.stderr) < 2_000_000, (len(r.stderr), noisy[-3:])
    assert len(noisy) - sum(1 for line in noisy if SUMMARY.search(line)) + counted == 200_001


def test_the_summary_counts_every_byte_left_out_newlines_included():
    r, shown, clock = relay(per_second=1, max_line=100)
    r.feed(b"shown\nab\ncde\n")  # two lines left out: 3 + 4 bytes
    r.feed(b"fghij\n")  # one more: 6 bytes
    clock.now += 2  # the next second: the summary comes first
    r.feed(b"next\n")
    assert shown == ["shown", "(3 stderr line(s), 13 bytes, not shown: more than 1 lines a second)", "next"]


def test_a_line_left_out_counts_its_bytes_when_it_comes_in_pieces():
    """Past the budget, a line whose first piece has no newline yet: that piece's bytes are
    in the summary too, with the rest of its line."""
    r, shown, clock = relay(per_second=1, max_line=100)
    r.feed(b"shown\n")
    r.feed(b"abcd")  # over the budget, no newline yet: 4 bytes of a line left out
    r.feed(b"ef\n")  # its end: 3 more, the newline included
    clock.now += 2
    r.feed(b"next\n")
    assert shown == ["shown", "(1 stderr line(s), 7 bytes, not shown: more than 1 lines a second)", "next"]
