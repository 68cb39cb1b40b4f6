"""A test worker with many behaviours, chosen by argv[1].  Speaks through the SDK."""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path

from etlstage.worker import Extractor, Loader, Request, Transformer, main


class Count(Extractor):
    """count N [per_cycle]: plain: messages 0..N-1; cyclic: per_cycle per request, offsets in state_dir."""

    def __init__(self, n: int, per_cycle: int = 10) -> None:
        self.n, self.per_cycle = n, per_cycle

    def setup(self) -> None:
        self.offset_file = Path(self.scenario.state_dir or ".") / f"offset-{self.scenario.instance}"
        self.committed = int(self.offset_file.read_text()) if self.offset_file.exists() else 0
        self.pending = self.committed

    def on_window_done(self, request: Request) -> None:
        tmp = self.offset_file.with_suffix(".tmp")
        tmp.write_text(str(self.pending))
        os.replace(tmp, self.offset_file)
        self.committed = self.pending

    def extract(self, request: Request | None):
        if request is None:
            return (b"%d" % i for i in range(self.n))
        if request.start is not None:  # supervisor-managed offsets: [start, end) capped at n
            return [b"%d" % i for i in range(int(request.start), min(int(request.end), self.n))]
        start = self.committed
        end = min(self.n, start + self.per_cycle)
        self.pending = end
        return [b"%d" % i for i in range(start, end)]


class Upper(Transformer):
    def process(self, messages):
        return [m.upper() for m in messages]


class Counting(Transformer):
    """counting: passes messages on and reports how many it saw (Worker.report)."""

    seen = 0

    def process(self, messages):
        self.seen += len(messages)
        return messages

    def report(self):
        return {"seen": self.seen, "by size": {"short": sum(1 for _ in range(0))}}


class Fanout(Transformer):
    """0 results for multiples of 3, 2 for multiples of 3 plus 1, else 1."""

    def process(self, messages):
        out = []
        for m in messages:
            k = int(m) % 3 if m.isdigit() else 2
            out.extend([] if k == 0 else [m + b"a", m + b"b"] if k == 1 else [m])
        return out


class Append(Loader):
    """append FILE: one line per message, fsync'd before the acknowledgement."""

    def __init__(self, path: str) -> None:
        self.path = path

    def load(self, messages):
        with open(self.path, "ab") as f:
            f.write(b"".join(m + b"\n" for m in messages))
            f.flush()
            os.fsync(f.fileno())


class Idempotent(Loader):
    """idem FILE: appends each key once; keys already in FILE are skipped (replays are absorbed)."""

    def __init__(self, path: str) -> None:
        self.path = path

    def setup(self) -> None:
        self.keys: set[bytes] = set()
        if os.path.exists(self.path):
            with open(self.path, "rb+") as f:
                data = f.read()
                end = data.rfind(b"\n") + 1
                f.truncate(end)  # a line cut short by a crash is dropped: its batch was never acknowledged
            self.keys.update(data[:end].split(b"\n")[:-1])

    def load(self, messages):
        new = [m for m in dict.fromkeys(messages) if m not in self.keys]
        if new:
            with open(self.path, "ab") as f:
                f.write(b"".join(m + b"\n" for m in new))
                f.flush()
                os.fsync(f.fileno())
            self.keys.update(new)


class Batches(Loader):
    """batches FILE: one JSON line per batch (the batch's messages), to check batching."""

    def __init__(self, path: str) -> None:
        self.path = path

    def load(self, messages):
        with open(self.path, "a") as f:
            f.write(json.dumps([m.decode() for m in messages]) + "\n")


class Poison(Transformer):
    """poison WORD: crash whenever a batch holds WORD."""

    def __init__(self, word: str) -> None:
        self.word = word.encode()

    def process(self, messages):
        if self.word in messages:
            print(f"poison message {self.word!r}", file=sys.stderr)
            os._exit(7)
        return messages


def raw_worker(kind: str) -> None:
    """Misbehaving workers written without the SDK."""
    out = sys.stdout.buffer
    if kind == "garbage":
        sys.stdin.buffer.read(1)
        out.write(b"\x17garbage")
        out.flush()
        time.sleep(30)
    elif kind == "hang":
        sys.stdin.buffer.read(1)
        time.sleep(3600)
    elif kind == "no-eom":
        sys.stdin.buffer.read(1)
        out.write(b"result-without-eom\x00")
        out.flush()
        time.sleep(30)
    elif kind == "exit-early":
        sys.stdin.buffer.read(1)
        sys.exit(3)
    elif kind == "ignore-term":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        while chunk := sys.stdin.buffer.read1(65536):  # an L-worker: EOP per message...
            out.write(b"\x00" * chunk.count(b"\n"))
            out.flush()
        time.sleep(3600)  # ...that does not exit when its stdin closes, nor on SIGTERM
    elif kind == "marker-in-result":  # T: answers each message with a result holding BNC's byte 0x11
        while sys.stdin.buffer.read1(65536):
            out.write(b"bad\x11byte\n\x00")
            out.flush()


def build(argv: list[str]):
    kind, args = argv[1], argv[2:]
    if kind == "count":
        return Count(int(args[0]), *(int(a) for a in args[1:]))
    if kind == "upper":
        return Upper()
    if kind == "pass":
        return lambda messages: messages
    if kind == "counting":
        return Counting()
    if kind == "fanout":
        return Fanout()
    if kind == "append":
        return Append(args[0])
    if kind == "idem":
        return Idempotent(args[0])
    if kind == "batches":
        return Batches(args[0])
    if kind == "poison":
        return Poison(args[0])
    return None


if __name__ == "__main__":
    worker = build(sys.argv)
    if worker is None:
        raw_worker(sys.argv[1])
    else:
        main(worker)
