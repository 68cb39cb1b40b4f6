"""An echo T- or L-worker that misbehaves once at chosen answers (raw protocol, no SDK).

argv: FLAG_DIR [KIND@N ...]; KIND is one of
  stray    one extra EOP after answer N
  missing  answer N without its EOP
  dup      answer N written twice (results and EOP)
Each fault fires once across restarts (a flag file in FLAG_DIR marks it spent), as a
worker with a transient bug would.  Answers count from 1 in each process.
"""

from __future__ import annotations

import os
import sys


def main() -> int:
    flags, faults = sys.argv[1], sys.argv[2:]
    eom = bytes.fromhex(os.environ["ETLSTAGE_EOM"])
    eop = bytes.fromhex(os.environ["ETLSTAGE_EOP"])
    eob = bytes.fromhex(os.environ["ETLSTAGE_EOB"])
    bnc = bytes.fromhex(os.environ["ETLSTAGE_BNC"])
    is_t = os.environ["ETLSTAGE_TYPE"] == "T"
    batch = os.environ["ETLSTAGE_MODE"] == "batch"
    worker_driven = batch and os.environ["ETLSTAGE_BATCH_DRIVER"] == "worker"
    size = int(os.environ["ETLSTAGE_BATCH_SIZE"])
    out = sys.stdout.buffer
    answers = 0

    def spend(kind: str) -> bool:
        if f"{kind}@{answers}" not in faults:
            return False
        flag = os.path.join(flags, f"{kind}@{answers}")
        if os.path.exists(flag):
            return False
        open(flag, "w").close()
        return True

    def answer(messages: list[bytes]) -> None:
        nonlocal answers
        answers += 1
        reply = b"".join(m + eom for m in messages) if is_t else b""
        body = reply + (b"" if spend("missing") else eop)
        if spend("dup"):
            body += reply + eop
        if spend("stray"):
            body += eop
        out.write(body)
        out.flush()

    pending: list[bytes] = []
    buf = b""
    stdin = sys.stdin.buffer.raw  # type: ignore[attr-defined]
    while True:
        chunk = stdin.read(65536)
        if not chunk:
            return 0
        buf += chunk
        while buf:
            if buf[:1] == eob:
                buf = buf[1:]
                answer(pending)
                pending = []
                continue
            at = buf.find(eom)
            if at < 0:
                break
            message, buf = buf[:at], buf[at + 1 :]
            if not batch:
                answer([message])
                continue
            pending.append(message)
            if worker_driven:
                if len(pending) < size:
                    out.write(bnc)
                    out.flush()
                else:
                    answer(pending)
                    pending = []


if __name__ == "__main__":
    sys.exit(main())
