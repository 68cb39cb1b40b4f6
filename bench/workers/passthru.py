"""Bench T-worker: returns every message unchanged.

``--lines``: the same transform over newline-ended lines on stdin, for Spark's
``RDD.pipe()`` (no protocol: lines in, lines out), in chunks as the SDK hands batches."""

import sys

from etlstage.worker import run_transformer


def transform(messages: list[bytes]) -> list[bytes]:
    return messages


def lines(chunk: int = 1000) -> None:
    out = sys.stdout.buffer
    batch: list[bytes] = []
    for line in sys.stdin.buffer:
        batch.append(line)
        if len(batch) == chunk:
            out.writelines(transform(batch))
            batch = []
    out.writelines(transform(batch))
    out.flush()


if __name__ == "__main__":
    lines() if sys.argv[1:] == ["--lines"] else run_transformer(transform)
