"""What checking a block of results for a stray EOM costs the Python SDK, per message.

    python bench/framing_check.py [--messages 10000] [--rounds 7]

Rows, measured in one run for each message size, the best of ``--rounds``:

* ``count``: ``block.count(EOM)`` against the number of messages (walks every byte);
* ``in, bytes``: one ``EOM in message`` per message with the marker as ``bytes`` (the
  check before 2026-11-26: CPython first tries the needle as an int, and raises and
  clears a TypeError per message);
* ``in, int``: the same with the marker's ``int`` value (straight to ``memchr``);
* ``check_messages``: the whole check as the SDK runs it (encode the block, the EOM rule,
  the other markers), this checkout's code.
"""

from __future__ import annotations

import argparse
import operator
import sys
import timeit
from itertools import repeat
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from etlstage.protocol.framing import check_messages
from etlstage.protocol.markers import DEFAULT_MARKERS


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--messages", type=int, default=10_000)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--sizes", default="16,64,128,256,1024,4096")
    a = ap.parse_args()
    eom, eom_bytes = DEFAULT_MARKERS.eom, DEFAULT_MARKERS.EOM

    def per_message(fn: object, reps: int) -> float:
        best = min(timeit.repeat(fn, number=reps, repeat=a.rounds))  # type: ignore[arg-type]
        return best / reps / a.messages * 1e6

    print(f"µs per message, {a.messages} messages a block, best of {a.rounds}")
    print(f"{'size':>6} {'count':>8} {'in, bytes':>10} {'in, int':>8} {'check_messages':>15}")
    for size in (int(s) for s in a.sizes.split(",")):
        msgs = [b"x" * size for _ in range(a.messages)]
        block = eom_bytes.join(msgs) + eom_bytes
        reps = max(1, 2_000_000 // (size * a.messages // 100 + 1))
        row = [
            per_message(lambda b=block: b.count(eom_bytes), reps),
            per_message(lambda m=msgs: any(map(operator.contains, m, repeat(eom_bytes))), reps),
            per_message(lambda m=msgs: any(map(operator.contains, m, repeat(eom))), reps),
            per_message(lambda m=msgs: check_messages(m, DEFAULT_MARKERS), reps),
        ]
        print(f"{size:>6} " + " ".join(f"{v:>{w}.3f}" for v, w in zip(row, (8, 10, 8, 15), strict=True)))


if __name__ == "__main__":
    main()
