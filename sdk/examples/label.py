#!/usr/bin/env python3
"""label.py - a T-worker with the Python SDK: ``n`` becomes ``item n ✓`` (UTF-8)."""

from etlstage.worker import run_transformer


def label(messages: list[bytes]) -> list[bytes]:
    return [b"item " + m + " ✓".encode() for m in messages]


if __name__ == "__main__":
    run_transformer(label)
