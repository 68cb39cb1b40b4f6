"""Bench L-worker: counts messages and bytes; writes the totals to FILE when stdin closes.

With a second argument MARKS, it also appends ``<unix time> <messages>`` to MARKS each
time another 10,000 messages were loaded (and the rest at the end): the rate at the
sink over time, whatever engine runs it (bench/spark_engine.py's steady-state rate).
"""

import sys
import time

from etlstage.worker import Loader, main

EVERY = 10_000


class Tally(Loader):
    def __init__(self, path: str, marks: str = "") -> None:
        self.path = path
        self.marks = marks
        self.messages = self.bytes = 0
        self.marked = 0

    def load(self, messages):
        self.messages += len(messages)
        self.bytes += sum(map(len, messages))
        if self.marks and self.messages - self.marked >= EVERY:
            self._mark()

    def _mark(self) -> None:
        with open(self.marks, "a") as f:
            f.write(f"{time.time():.6f} {self.messages - self.marked}\n")
        self.marked = self.messages

    def teardown(self) -> None:
        if self.marks and self.messages > self.marked:
            self._mark()
        with open(self.path, "w") as f:
            f.write(f"{self.messages} {self.bytes}\n")


if __name__ == "__main__":
    main(Tally(*sys.argv[1:3]))
