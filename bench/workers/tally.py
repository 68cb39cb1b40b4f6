"""Bench L-worker: counts messages and bytes; writes the totals to FILE when stdin closes."""

import sys

from etlstage.worker import Loader, main


class Tally(Loader):
    def __init__(self, path: str) -> None:
        self.path = path
        self.messages = self.bytes = 0

    def load(self, messages):
        self.messages += len(messages)
        self.bytes += sum(map(len, messages))

    def teardown(self) -> None:
        with open(self.path, "w") as f:
            f.write(f"{self.messages} {self.bytes}\n")


if __name__ == "__main__":
    main(Tally(sys.argv[1]))
