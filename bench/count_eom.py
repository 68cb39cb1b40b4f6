"""What counting the messages of a block costs, by message size: ``count_eom`` against
each of the two ways it chooses between.

    python bench/count_eom.py [--block-mib 4] [--rounds 5]

Rows, measured in one run for each message size, the best of ``--rounds``, in ms per block:

* ``count``: ``block.count(EOM)`` (walks every byte; fast when EOMs are dense);
* ``find``: hopping from EOM to EOM with ``block.find`` (``memchr``; fast when they are sparse);
* ``count_eom``: this checkout's choice between them (the EOMs in the first 4 KiB decide);
* ``numpy``: the Spark engine's tasks' count (``etlstage.spark.tasks.blocks.count_messages``:
  numpy over 256 KiB slices; numpy is there with pyspark), when numpy is installed.
"""

from __future__ import annotations

import argparse
import timeit

from etlstage.protocol.framing import count_eom

try:
    from etlstage.spark.tasks.blocks import count_messages
except ImportError:  # no numpy / pyarrow: the supervisor's counts only
    count_messages = None

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
    names = ["count", "find", "count_eom"] + (["numpy"] if count_messages else [])
    print(f"{'message':>10} " + " ".join(f"{n:>10}" for n in names) + f"   (ms per {args.block_mib} MiB block)")
    for message in (4, 100, 1_000, 10_000, 100_000):
        block = (b"x" * (message - 1) + EOM) * (size // message)
        ways = {
            "count": lambda b=block: b.count(EOM),
            "find": lambda b=block: hop(b),
            "count_eom": lambda b=block: count_eom(b, EOM),
        }
        if count_messages:
            ways["numpy"] = lambda b=block: count_messages(b, EOM[0])
        assert len({f() for f in ways.values()}) == 1  # every way counts the same
        ms = {k: min(timeit.repeat(f, number=1, repeat=args.rounds)) * 1e3 for k, f in ways.items()}
        print(f"{message:>9}B " + " ".join(f"{ms[n]:>10.2f}" for n in names))


if __name__ == "__main__":
    main()
