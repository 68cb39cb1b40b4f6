"""Bench L-worker: appends every message as a line to FILE (no fsync: a bench helper)."""

import sys

from etlstage.worker import run_loader

if __name__ == "__main__":
    with open(sys.argv[1], "ab") as out:
        run_loader(lambda messages: out.write(b"".join(m + b"\n" for m in messages)))
