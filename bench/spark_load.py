"""Spark loader throughput, side by side with the naive and the Spark-less paths, in one run.

    python bench/spark_load.py [--messages 300000] [--batch 100000] [--master local[2]] [--rdss]

Rows (same ~1 KB JSON messages, same columns, same batches):
  naive createDataFrame   pyarrow.json columns -> spark.createDataFrame(arrow) -> append Parquet
  direct pyarrow          pyarrow.json columns -> pyarrow Parquet file (no Spark, no key index)
  etlstage-spark-load     SparkLoader.load(): keys + SQLite index, staging, Spark write, publish
"""

from __future__ import annotations

import argparse
import logging
import os
import random
import shutil
import string
import sys
import tempfile
import time
import uuid

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import orjson
import pyarrow.parquet as pq
from etlstage_workers.spark.config import LoaderConfig, parse_column
from etlstage_workers.spark.extract import prepare
from etlstage_workers.spark.loader import SparkLoader

from etlstage.protocol.scenario import Scenario

COLUMNS = [
    "messageId=/messageHeader/messageId",
    "messageType=/messageHeader/messageType",
    "publishedTimestamp=/messageHeader/messageTimings/publishedTimestamp",
    "position:long=/messageHeader/messageSequence/position",
    "objectUuid=/messageBody/objectUuid",
    "objectTitle=/messageBody/objectTitle",
    "objectValue:double=/messageBody/objectValue",
]


def make_messages(n: int, seed: int = 7) -> list[bytes]:
    rnd = random.Random(seed)
    letters = string.ascii_letters + "      "
    out = []
    for i in range(n):
        doc = {
            "messageHeader": {
                "messageId": str(uuid.UUID(int=rnd.getrandbits(128), version=4)),
                "messageClass": "Event",
                "messageType": rnd.choice(["MetadataCreate", "MetadataUpdate", "MetadataDelete"]),
                "messageTimings": {"publishedTimestamp": "2024-05-01T12:00:00Z"},
                "messageSequence": {"sequence": str(uuid.UUID(int=rnd.getrandbits(128))), "position": 1, "total": 1},
                "version": "3.0.2",
                "generator": "bench",
            },
            "messageBody": {
                "objectUuid": str(uuid.UUID(int=rnd.getrandbits(128))),
                "objectTitle": "".join(rnd.choices(letters, k=420)),
                "objectDescription": "".join(rnd.choices(letters, k=240)),
                "objectValue": i * 0.5,
                "objectKeywords": ["alpha", "beta", str(i)],
            },
        }
        out.append(orjson.dumps(doc))
    return out


def batches(messages: list[bytes], size: int) -> list[list[bytes]]:
    return [messages[i : i + size] for i in range(0, len(messages), size)]


def timed(fn, parts: list[list[bytes]]) -> float:
    start = time.perf_counter()
    for part in parts:
        fn(part)
    return time.perf_counter() - start


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--messages", type=int, default=300_000)
    ap.add_argument("--batch", type=int, default=100_000)
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--rdss", action="store_true", help="RDSS mode for the loader row (body JSON text + raw)")
    ap.add_argument("--dir", default=None, help="work directory (default: a temporary one)")
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO if os.environ.get("BENCH_VERBOSE") else logging.WARNING, stream=sys.stderr)

    work = args.dir or tempfile.mkdtemp(prefix="etlstage-bench-spark-")
    messages = make_messages(args.messages)
    parts = batches(messages, args.batch)
    avg = sum(map(len, messages)) / len(messages)
    if args.rdss:
        config = LoaderConfig(output=os.path.join(work, "loader"), rdss=True, master=args.master)
    else:
        columns = tuple(parse_column(c) for c in COLUMNS)
        config = LoaderConfig(
            output=os.path.join(work, "loader"), columns=columns, key="/messageHeader/messageId", master=args.master
        )
    config = LoaderConfig(**{**config.__dict__, "state_dir": os.path.join(work, "state")}).check()
    json_config = LoaderConfig(output="-", columns=tuple(parse_column(c) for c in COLUMNS)).check()

    loader = SparkLoader(config)
    loader.scenario = Scenario(type="L", mode="batch", batch_size=args.batch, stage="bench")
    loader.setup()  # starts the one SparkSession the other rows share
    spark = loader.spark

    # Warm-up: JIT, class loading, first-job costs, for every path.
    warm = make_messages(2000, seed=1)
    spark.createDataFrame(prepare(warm, json_config).table).write.mode("append").parquet(os.path.join(work, "warm"))
    loader.load(warm)

    def naive(part: list[bytes]) -> None:
        table = prepare(part, json_config).table
        spark.createDataFrame(table).write.mode("append").parquet(os.path.join(work, "naive"))

    os.makedirs(os.path.join(work, "direct"), exist_ok=True)

    def direct(part: list[bytes]) -> None:
        table = prepare(part, json_config).table
        pq.write_table(table, os.path.join(work, "direct", f"{uuid.uuid4().hex}.parquet"))

    rows = [
        ("naive createDataFrame", timed(naive, parts)),
        ("direct pyarrow (no Spark)", timed(direct, parts)),
        (f"etlstage-spark-load{' --rdss' if args.rdss else ''}", timed(loader.load, parts)),
    ]
    replay = timed(loader.load, parts)  # every key already published: the duplicate path
    rows.append(("etlstage-spark-load replay (all dups)", replay))
    stats = loader.store.stats() if loader.store else {}
    loader.teardown()

    print(f"\n{len(messages)} messages of {avg:.0f} B avg, batches of {args.batch}, master {args.master}")
    print(f"{'path':40} {'seconds':>8} {'msg/s':>10}")
    for name, seconds in rows:
        print(f"{name:40} {seconds:8.2f} {len(messages) / seconds:10.0f}")
    print(f"key index stats: {stats}")
    if args.rdss:
        print("(the naive and direct rows extract the JSON columns; only the loader rows run RDSS mode)")
    if not args.dir:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
