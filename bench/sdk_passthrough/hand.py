"""A pass-through T-worker written by hand in Python, the baseline of bench/sdk_throughput.py.

It does what the SDK does for it: markers and mode from ETLSTAGE_*, messages split with
``bytes.split``, each message (single mode) or batch (supervisor-driven) handed to
``transform``, the results framed, the replies of a chunk in one write.
"""

import os

EOM = bytes([int(os.environ.get("ETLSTAGE_EOM") or "0a", 16)])
EOP = bytes([int(os.environ.get("ETLSTAGE_EOP") or "00", 16)])
EOB = bytes([int(os.environ.get("ETLSTAGE_EOB") or "17", 16)])
BATCH = os.environ.get("ETLSTAGE_MODE") == "batch"


def transform(messages: list[bytes]) -> list[bytes]:
    return messages


def main() -> None:
    tail = b""
    batch: list[bytes] = []
    while chunk := os.read(0, 1 << 20):
        data = tail + chunk if tail else chunk
        out: list[bytes] = []
        if BATCH:
            pieces = data.split(EOB)
            tail = pieces.pop()
            for piece in pieces:
                batch.extend(piece.split(EOM)[:-1])
                results = transform(batch)
                if results:
                    out.append(EOM.join(results) + EOM)
                out.append(EOP)
                batch = []
            messages = tail.split(EOM)
            tail = messages.pop()
            batch.extend(messages)
        else:
            messages = data.split(EOM)
            tail = messages.pop()
            for m in messages:
                results = transform([m])
                if results:
                    out.append(EOM.join(results) + EOM)
                out.append(EOP)
        view = memoryview(b"".join(out))
        while view:
            view = view[os.write(1, view) :]


if __name__ == "__main__":
    main()
