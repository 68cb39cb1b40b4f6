"""Bench E-worker (plain): N messages of SIZE bytes.  --eob-every K writes EOB after
every K messages — only for the shell-pipe baseline, where no supervisor makes batches."""

import argparse
import itertools
import os
import sys

from etlstage.protocol import DEFAULT_MARKERS, check_messages
from etlstage.worker import Extractor, main


class Gen(Extractor):
    def __init__(self, n: int, size: int) -> None:
        self.n, self.size = n, size

    def extract(self, request):
        # lists of 4096 made by comprehensions, chained in C: no per-message Python step
        base = b"x" * (self.size - 10)
        n = self.n
        chunks = ([b"%010d" % i + base for i in range(s, min(n, s + 4096))] for s in range(0, n, 4096))
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
    a = p.parse_args()
    if a.eob_every:
        baseline(a.n, a.size, a.eob_every)
        sys.exit(0)
    main(Gen(a.n, a.size))
