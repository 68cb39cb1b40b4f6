"""Spark loader throughput, side by side with the baselines, in one run.

    python bench/spark_load.py [--messages 1000000] [--batch 100000] [--master local[2]] [--rdss]
                               [--conf KEY=VALUE ...]   (Spark settings for every row, for A/B runs)

Rows (same ~1.15 KB JSON messages, same 7 columns, same batches; one warm-up batch per
path first, so the JVM's JIT is warm for each):
  naive createDataFrame   pyarrow.json columns -> spark.createDataFrame(arrow) -> append Parquet
  direct pyarrow          pyarrow.json columns -> pyarrow Parquet file (no Spark, no key index)
  staged Parquet + Spark  pyarrow.json columns -> staged Parquet -> Spark reads, writes Parquet
                          (no key index, no fsync, one batch after the other)
  etlstage-spark-load     the worker as it runs: the SDK's loop over framed batches on stdin,
                          keys + SQLite index, staging, Spark write, fsync, publish, commit,
                          the next batch parsed while the previous one is written
  ... replay              the same input again: every key is a duplicate
  raw: ...                the two baselines again with the messages stored as one binary
                          column, not parsed (no columns, no key): what parsing costs
"""

from __future__ import annotations

import argparse
import contextlib
import io
import logging
import os
import random
import shutil
import string
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import orjson
import psutil
import pyarrow as pa
import pyarrow.parquet as pq
from etlstage_workers.spark.config import LoaderConfig, parse_column
from etlstage_workers.spark.extract import prepare
from etlstage_workers.spark.loader import SparkLoader
from etlstage_workers.spark.session import start_session

from etlstage.protocol import DEFAULT_MARKERS
from etlstage.protocol.scenario import Scenario
from etlstage.worker import serve

COLUMNS = [
    "messageId=/messageHeader/messageId",
    "messageType=/messageHeader/messageType",
    "publishedTimestamp=/messageHeader/messageTimings/publishedTimestamp",
    "position:long=/messageHeader/messageSequence/position",
    "objectUuid=/messageBody/objectUuid",
    "objectTitle=/messageBody/objectTitle",
    "objectValue:double=/messageBody/objectValue",
]


DISTINCT = 100_000  # documents generated; beyond that, copies with a new messageId


def make_messages(n: int, seed: int = 7) -> list[bytes]:
    rnd = random.Random(seed)
    letters = string.ascii_letters + "      "
    out = []
    for i in range(min(n, DISTINCT)):
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
    for i in range(DISTINCT, n):
        base = out[i % DISTINCT]
        old = orjson.loads(base)["messageHeader"]["messageId"].encode()
        out.append(base.replace(old, str(uuid.UUID(int=rnd.getrandbits(128), version=4)).encode(), 1))
    return out


def batches(messages: list[bytes], size: int) -> list[list[bytes]]:
    return [messages[i : i + size] for i in range(0, len(messages), size)]


def cpu_seconds() -> float:
    """CPU time of this process and its children so far (the JVM is one), user + system."""
    me = psutil.Process()
    total = sum(me.cpu_times()[:2])
    for child in me.children(recursive=True):
        with contextlib.suppress(psutil.Error):
            total += sum(child.cpu_times()[:2])
    return total


def timed(fn: Callable[[], object]) -> tuple[float, float]:
    """(wall seconds, CPU seconds of this process and the JVM) of one call."""
    cpu, start = cpu_seconds(), time.perf_counter()
    fn()
    return time.perf_counter() - start, cpu_seconds() - cpu


def framed(parts: list[list[bytes]], path: str) -> str:
    """The batches as the supervisor writes them to the worker's stdin (supervisor-driven)."""
    eom, eob = DEFAULT_MARKERS.EOM, DEFAULT_MARKERS.EOB
    with open(path, "wb") as f:
        for part in parts:
            f.write(eom.join(part) + eom + eob)
    return path


def run_worker(loader: SparkLoader, stdin_path: str, batch: int) -> None:
    """The loader behind the SDK's own loop, as ``etlstage-spark-load`` runs it."""
    scenario = Scenario(type="L", mode="batch", batch_size=batch, stage="bench")
    with open(stdin_path, "rb", buffering=0) as stdin:
        serve(loader, stdin=stdin, stdout=io.BytesIO(), scenario=scenario)


def spark_setting(item: str) -> tuple[str, str]:
    key, sep, value = item.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"{item!r}: expected key=value, e.g. spark.sql.shuffle.partitions=2")
    return key, value


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--messages", type=int, default=1_000_000)
    ap.add_argument("--batch", type=int, default=100_000)
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--rdss", action="store_true", help="RDSS mode for the loader rows (body JSON text + raw)")
    ap.add_argument("--loader-only", action="store_true", help="skip the baseline rows")
    ap.add_argument("--conf", action="append", default=[], type=spark_setting, metavar="KEY=VALUE", help="repeatable")
    ap.add_argument("--dir", default=None, help="work directory (default: a temporary one)")
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO if os.environ.get("BENCH_VERBOSE") else logging.WARNING, stream=sys.stderr)

    work = args.dir or tempfile.mkdtemp(prefix="etlstage-bench-spark-")
    messages = make_messages(args.messages + args.batch)
    warm, messages = messages[: args.batch], messages[args.batch :]
    parts = batches(messages, args.batch)
    avg = sum(map(len, messages)) / len(messages)
    columns = tuple(parse_column(c) for c in COLUMNS)
    common: dict[str, Any] = {"state_dir": os.path.join(work, "state"), "master": args.master}
    if args.rdss:
        config = LoaderConfig(output=os.path.join(work, "loader"), rdss=True, **common).check()
    else:
        config = LoaderConfig(
            output=os.path.join(work, "loader"), columns=columns, key="/messageHeader/messageId", **common
        ).check()
    json_config = LoaderConfig(output="-", columns=columns).check()
    spark = start_session(args.master, "bench", dict(args.conf), connect_timeout=10, log_level="WARN")
    stage_count = iter(range(1 << 30))

    def naive(part: list[bytes]) -> None:
        table = prepare(part, json_config).table
        spark.createDataFrame(table).write.mode("append").parquet(os.path.join(work, "naive"))

    os.makedirs(os.path.join(work, "direct"), exist_ok=True)

    def direct(part: list[bytes]) -> None:
        table = prepare(part, json_config).table
        pq.write_table(table, os.path.join(work, "direct", f"{uuid.uuid4().hex}.parquet"))

    def staged(part: list[bytes]) -> None:
        table = prepare(part, json_config).table
        path = os.path.join(work, "staged-in", f"{next(stage_count)}.parquet")
        os.makedirs(os.path.dirname(path), exist_ok=True)
        pq.write_table(table, path, row_group_size=len(part) // 2 + 1, compression="none")
        spark.read.parquet("file://" + path).write.mode("append").parquet("file://" + os.path.join(work, "staged"))

    def raw_table(part: list[bytes]) -> pa.Table:
        return pa.table({"message": pa.array(part, pa.binary())})

    def direct_raw(part: list[bytes]) -> None:
        pq.write_table(raw_table(part), os.path.join(work, "direct", f"{uuid.uuid4().hex}.parquet"))

    def staged_raw(part: list[bytes]) -> None:
        path = os.path.join(work, "staged-raw-in", f"{next(stage_count)}.parquet")
        os.makedirs(os.path.dirname(path), exist_ok=True)
        pq.write_table(raw_table(part), path, row_group_size=len(part) // 2 + 1, compression="none")
        spark.read.parquet("file://" + path).write.mode("append").parquet("file://" + os.path.join(work, "staged-raw"))

    rows = []
    for name, fn in [
        ("naive createDataFrame", naive),
        ("direct pyarrow (no Spark)", direct),
        ("staged Parquet + Spark", staged),
        ("raw: direct pyarrow, messages unparsed", direct_raw),
        ("raw: staged Parquet + Spark, unparsed", staged_raw),
    ]:
        if args.loader_only:
            break
        fn(warm)
        rows.append((name, *timed(lambda fn=fn: [fn(part) for part in parts])))

    loader_name = f"etlstage-spark-load{' --rdss' if args.rdss else ''}"
    run_worker(SparkLoader(config, spark=spark), framed([warm], os.path.join(work, "warm.in")), args.batch)
    stdin_path = framed(parts, os.path.join(work, "stdin"))
    loader = SparkLoader(config, spark=spark)
    rows.append((loader_name, *timed(lambda: run_worker(loader, stdin_path, args.batch))))
    replay = SparkLoader(config, spark=spark)  # every key already published
    rows.append((f"{loader_name} replay (all dups)", *timed(lambda: run_worker(replay, stdin_path, args.batch))))
    spark.stop()

    print(f"\n{len(messages)} messages of {avg:.0f} B avg, batches of {args.batch}, master {args.master}")
    print(f"{'path':44} {'seconds':>8} {'msg/s':>10} {'CPU s per 100k':>15}")
    for name, seconds, cpu in rows:
        print(f"{name:44} {seconds:8.2f} {len(messages) / seconds:10.0f} {cpu * 100_000 / len(messages):15.2f}")
    print(f"loader report: {loader.report()}")
    if args.rdss:
        print("(the baseline rows extract the JSON columns; only the loader rows run RDSS mode)")
    if not args.dir:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
