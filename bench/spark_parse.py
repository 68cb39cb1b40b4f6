"""The Spark loader's parse step alone: pyarrow.json (what the loader uses) against msgspec.

    python bench/spark_parse.py [--messages 100000] [--runs 3]

Both turn the same ~1.15 KB bench messages (bench/spark_load.py) into the 7 Arrow columns
and the key list.  msgspec is not a dependency: ``pip install msgspec`` to get its row.
Prints wall and CPU seconds (all threads of this process) per run.
"""

import argparse
import os
import sys
import time
from collections.abc import Callable

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import pyarrow as pa
from etlstage_workers.spark.config import LoaderConfig, parse_column
from etlstage_workers.spark.extract import prepare
from spark_load import COLUMNS, make_messages


def msgspec_parse() -> Callable[[list[bytes]], object] | None:
    """The same columns through msgspec's typed decoding, or None without msgspec."""
    try:
        import msgspec
    except ImportError:
        return None

    class Timings(msgspec.Struct, frozen=True):
        publishedTimestamp: str | None = None

    class Sequence(msgspec.Struct, frozen=True):
        position: int | None = None

    class Header(msgspec.Struct, frozen=True):
        messageId: str | None = None
        messageType: str | None = None
        messageTimings: Timings = Timings()
        messageSequence: Sequence = Sequence()

    class Body(msgspec.Struct, frozen=True):
        objectUuid: str | None = None
        objectTitle: str | None = None
        objectValue: float | None = None

    class Doc(msgspec.Struct):
        messageHeader: Header = Header()
        messageBody: Body = Body()

    decoder = msgspec.json.Decoder(list[Doc])

    def parse(messages: list[bytes]) -> object:
        docs = decoder.decode(b"[" + b",".join(messages) + b"]")
        heads = [d.messageHeader for d in docs]
        bodies = [d.messageBody for d in docs]
        keys = [h.messageId for h in heads]
        table = pa.table(
            {
                "messageId": pa.array(keys, pa.string()),
                "messageType": pa.array([h.messageType for h in heads], pa.string()),
                "publishedTimestamp": pa.array([h.messageTimings.publishedTimestamp for h in heads], pa.string()),
                "position": pa.array([h.messageSequence.position for h in heads], pa.int64()),
                "objectUuid": pa.array([b.objectUuid for b in bodies], pa.string()),
                "objectTitle": pa.array([b.objectTitle for b in bodies], pa.string()),
                "objectValue": pa.array([b.objectValue for b in bodies], pa.float64()),
            }
        )
        return table, keys

    return parse


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--messages", type=int, default=100_000)
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    messages = make_messages(args.messages)
    config = LoaderConfig(
        output="-", columns=tuple(parse_column(c) for c in COLUMNS), key="/messageHeader/messageId"
    ).check()
    paths: list[tuple[str, Callable[[list[bytes]], object]]] = [("pyarrow.json (loader)", lambda m: prepare(m, config))]
    other = msgspec_parse()
    if other is None:
        print("msgspec not installed: its row is left out (pip install msgspec)")
    else:
        paths.append(("msgspec", other))
    print(f"{len(messages)} messages; seconds per run")
    print(f"{'path':24} {'wall':>6} {'CPU':>6}")
    for _ in range(args.runs):
        for name, parse in paths:
            cpu, wall = time.process_time(), time.perf_counter()
            parse(messages)
            print(f"{name:24} {time.perf_counter() - wall:6.2f} {time.process_time() - cpu:6.2f}")


if __name__ == "__main__":
    main()
