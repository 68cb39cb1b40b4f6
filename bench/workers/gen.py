"""Bench E-worker (plain): N messages of SIZE bytes.  --eob-every K writes EOB after
every K messages — only for the shell-pipe baseline, where no supervisor makes batches."""

import argparse
import itertools
import os
import sys

from etlstage.protocol import DEFAULT_MARKERS, check_messages
from etlstage.worker import Extractor, main


class Gen(Extractor):
    """Plain: all N messages.  Cyclic: PER_CYCLE messages a request, then empty cycles."""

    def __init__(self, n: int, size: int, per_cycle: int) -> None:
        self.n, self.size, self.per_cycle = n, size, per_cycle
        self.next = 0

    def extract(self, request):
        if request is None:
            return self._range(0, self.n)
        start, self.next = self.next, min(self.n, self.next + self.per_cycle)
        return self._range(start, self.next)

    def _range(self, start: int, stop: int):
        # lists of 4096 made by comprehensions, chained in C: no per-message Python step
        base = b"x" * (self.size - 10)
        chunks = ([b"%010d" % i + base for i in range(s, min(stop, s + 4096))] for s in range(start, stop, 4096))
        return itertools.chain.from_iterable(chunks)


def baseline(n: int, size: int, every: int) -> None:
    """The same messages, checked and framed as the SDK does, with an EOB after each K."""
    out = os.fdopen(1, "wb", buffering=1 << 20)
    base = b"x" * (size - 10)
    for start in range(0, n, every):
        k = min(every, n - start)
        out.write(check_messages([b"%010d" % i + base for i in range(start, start + k)], DEFAULT_MARKERS) + b"\x17")
    out.flush()


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("n", type=int)
    p.add_argument("--size", type=int, default=100)
    p.add_argument("--eob-every", type=int, default=0)
    p.add_argument("--per-cycle", type=int, default=100_000)
    a = p.parse_args()
    if a.eob_every:
        baseline(a.n, a.size, a.eob_every)
        sys.exit(0)
    main(Gen(a.n, a.size, a.per_cycle))
