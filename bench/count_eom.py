"""What counting the messages of a block costs, by message size: ``count_eom`` against
each of the two ways it chooses between.

    python bench/count_eom.py [--block-mib 4] [--rounds 5]

Rows, measured in one run for each message size, the best of ``--rounds``, in ms per block:

* ``count``: ``block.count(EOM)`` (walks every byte; fast when EOMs are dense);
* ``find``: hopping from EOM to EOM with ``block.find`` (``memchr``; fast when they are sparse);
* ``count_eom``: this checkout's choice between them (the EOMs in the first 4 KiB decide).
"""

from __future__ import annotations

import argparse
import timeit

from etlstage.protocol.framing import count_eom

EOM = b"\n"


def hop(block: bytes) -> int:
    n, pos = 0, block.find(EOM)
    while pos >= 0:
        n, pos = n + 1, block.find(EOM, pos + 1)
    return n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--block-mib", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    size = args.block_mib << 20
    print(f"{'message':>10} {'count':>10} {'find':>10} {'count_eom':>10}   (ms per {args.block_mib} MiB block)")
    for message in (4, 100, 1_000, 10_000, 100_000):
        block = (b"x" * (message - 1) + EOM) * (size // message)
        ways = {
            "count": lambda b=block: b.count(EOM),
            "find": lambda b=block: hop(b),
            "count_eom": lambda b=block: count_eom(b, EOM),
        }
        assert len({f() for f in ways.values()}) == 1  # all three count the same
        ms = {k: min(timeit.repeat(f, number=1, repeat=args.rounds)) * 1e3 for k, f in ways.items()}
        print(f"{message:>9}B {ms['count']:>10.2f} {ms['find']:>10.2f} {ms['count_eom']:>10.2f}")


if __name__ == "__main__":
    main()
