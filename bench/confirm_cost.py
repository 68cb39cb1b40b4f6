"""What confirming answers costs the stock pipeline: this checkout against other
checkouts of the supervisor, in turn, on the same input.

    python bench/confirm_cost.py --n 40000 --rounds 2 --arm "old rule=/path/to/checkout"

Each arm runs the stock stages (bench/stock_pipeline.py: the Kinesis extractor against
the bench's emulator, RDSS on two instances, the Spark loader into Delta) as a whole
``etlstage run --once``, with the supervisor imported from that arm's checkout
(PYTHONPATH); the workers are this checkout's in every arm, so only the supervisor's
rules differ. Prints seconds and records/s per run.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import stock_pipeline as sp


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=40000, help="~1 KB RDSS messages")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--arm", action="append", default=[], help="NAME=CHECKOUT (another supervisor)")
    a = ap.parse_args()
    arms = {"this checkout": str(HERE.parent)}
    arms.update(dict(arm.split("=", 1) for arm in a.arm))
    work = Path(tempfile.mkdtemp(prefix="etlstage-confirm-bench-"))
    (work / "records.jsonl").write_bytes(b"\n".join(sp.messages(a.n, False)) + b"\n")
    st = sp.stock_stages()
    text = sp.pipeline(
        st["kinesis"], st["rdss"], st["spark"], services=sp.emulator_service(sp.stream_of(st["kinesis"]))
    )
    for r in range(a.rounds):
        for name, root in arms.items():
            os.environ["PYTHONPATH"] = root
            seconds = sp.run(work, text)
            print(f"round {r + 1} {name}: {seconds:.1f} s, {a.n / seconds:,.0f} records/s", flush=True)


if __name__ == "__main__":
    main()
