"""Delta tables against plain Parquet: fixed cost per batch and cost per message, local disk
and S3 (moto's server on loopback), in one run.

    python bench/lake.py [--small 5000] [--large 50000] [--repeat 3] [--no-s3] [--master local[2]]
    python bench/lake.py --stock        # the stock pipeline (stages.yaml, 5,000 demo messages):
                                        # one whole run with Delta, one with plain Parquet
    python bench/lake.py --ab spark.databricks.delta.merge.materializeSource=auto [--rounds 10]
                         [--base spark.sql.adaptive.enabled=false]
                                        # the loader's MERGE with its settings and with one
                                        # changed (KEY=VALUE,...), and plain Parquet, batch
                                        # after batch in turn; --base: set for every row
    python bench/lake.py --floor [--rounds 10] [--sizes 5000,50000] [--s3]
                                        # the loader's batch (three RDSS tables) against a
                                        # bare PySpark insert-only MERGE of the same rows
    python bench/lake.py --tables [--rounds 10] [--cold 3]
                                        # an RDSS batch (valid, invalid and error rows) merged
                                        # into its three tables at once (the loader) against
                                        # one table after the other, warm in turn in one
                                        # session, and each arm's first batch in a new JVM

Rows (the same RDSS-like ~1.15 KB JSON messages, the loader's RDSS columns, parsed once
with the loader's own ``prepare``; one warm-up batch per row first):
  delta merge      the loader's Delta path (workers/spark/lake.py): Arrow -> Spark ->
                   MERGE INTO ... ON _key WHEN NOT MATCHED THEN INSERT, one commit
  delta append     the same rows appended with Delta's idempotent write (txnAppId/txnVersion),
                   no MERGE: what the commit itself costs
  parquet          the same rows appended as plain Parquet files by Spark (no table log)

Each row is timed at two batch sizes; with t(n) = fixed + n * per_message, the two sizes
give both figures. The tables grow over the run (one table per row and storage), as a
loader's do. Figures: docs/performance-spark.md, "Delta tables".
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from etlstage_workers.spark import lake
from etlstage_workers.spark.config import LoaderConfig
from etlstage_workers.spark.extract import prepare
from etlstage_workers.spark.writer import shape

from bench.spark_load import make_messages
from bench.timed_run import timed_run
from etlstage.spark.setup.jars import fetch_named
from etlstage.spark.setup.spark_session import start_session


def session(master: str, s3_conf: dict[str, str]) -> Any:
    jars = [str(j) for name in ("delta", "s3") for j in fetch_named(name)]
    conf = {**lake.DELTA_SESSION, "spark.jars": ",".join(jars), "spark.ui.showConsoleProgress": "false", **s3_conf}
    return start_session(master, "bench-lake", conf, connect_timeout=10, log_level="ERROR")


def writers(spark: Any, config: LoaderConfig) -> dict[str, Callable[[Any, str, int], None]]:
    def delta_merge(prepared: Any, root: str, version: int) -> None:
        positions = list(range(len(prepared.keys)))
        lake.commit_batch(spark, config, root, prepared, positions)

    def frames(prepared: Any) -> list[Any]:
        tables = lake.batch_tables(prepared, list(range(len(prepared.keys))))
        return [(route, shape(spark.createDataFrame(t), config, True, keep=(lake.KEY,), routed=False))
                for route, t in tables.items()]  # fmt: skip

    def delta_append(prepared: Any, root: str, version: int) -> None:
        for route, df in frames(prepared):
            writer = df.write.format("delta").mode("append").option("txnAppId", "bench").option("txnVersion", version)
            writer.save(lake.table_path(root, route))

    def parquet(prepared: Any, root: str, version: int) -> None:
        for route, df in frames(prepared):
            df.write.format("parquet").mode("append").save(lake.table_path(root, route))

    return {"delta merge": delta_merge, "delta append": delta_append, "parquet": parquet}


def measure(write: Callable[[Any, str, int], None], prepared: Any, root: str, repeat: int, start: int) -> float:
    """Median seconds of ``repeat`` batches (after one warm-up), each with fresh keys."""
    times = []
    for i in range(repeat + 1):
        batch = fresh(prepared, start + i)
        t0 = time.perf_counter()
        write(batch, root, start + i)
        if i:
            times.append(time.perf_counter() - t0)
    return statistics.median(times)


def fresh(prepared: Any, n: int) -> Any:
    """The batch with new keys (a MERGE then inserts every row, as for new messages)."""
    import dataclasses

    return dataclasses.replace(prepared, keys=[f"{k}-{n}" for k in prepared.keys])


def settings(text: str) -> dict[str, str]:
    """``KEY=VALUE[,KEY=VALUE...]`` as a dict (no value here holds a comma)."""
    return dict(item.split("=", 1) for item in text.split(",") if item)


def ab(setting: str, rounds: int, n: int, master: str, base: str = "") -> None:
    """The loader's MERGE with the loader's session settings, the same with ``setting``
    (KEY=VALUE, several separated by commas) changed, and plain Parquet: one batch of each
    in turn (a busy machine slows all three alike), each into its own growing table; medians
    after two warm-up rounds.  ``base`` (the same form) is set for every row first: e.g.
    the Spark engine's ``spark.sql.adaptive.enabled=false``."""
    changed = settings(setting)
    spark = session(master, {})
    for k, v in settings(base).items():
        spark.conf.set(k, v)
    config = LoaderConfig(output="unused", format="delta", rdss=True).check()
    prepared = prepare(make_messages(n), config)
    write = writers(spark, config)
    rows = {"delta merge (loader's settings)": ("delta merge", {}), f"delta merge, {setting}": ("delta merge", changed),
            "parquet": ("parquet", {})}  # fmt: skip
    roots = {name: tempfile.mkdtemp(prefix="bench-lake-ab-") for name in rows}
    times: dict[str, list[float]] = {name: [] for name in rows}
    version = 0
    try:
        for r in range(rounds + 2):
            for name, (path, conf) in rows.items():
                before = {k: spark.conf.get(k, None) for k in conf}
                for k, v in conf.items():
                    spark.conf.set(k, v)
                version += 1
                t0 = time.perf_counter()
                write[path](fresh(prepared, version), roots[name], version)
                if r >= 2:
                    times[name].append(time.perf_counter() - t0)
                for k, v in before.items():
                    spark.conf.unset(k) if v is None else spark.conf.set(k, v)
    finally:
        spark.stop()
        for root in roots.values():
            shutil.rmtree(root, ignore_errors=True)
    for name, ts in times.items():
        print(
            f"{name:50} {n} messages per batch: median {statistics.median(ts):.3f} s, min {min(ts):.3f} s ({len(ts)} batches)"
        )


def mixed_batch(n: int, config: LoaderConfig) -> Any:
    """An RDSS batch of ``n`` with the demo's mix of routes: ~12 % invalid (an errorCode in
    the header), ~0.5 % error (not JSON), the rest valid."""
    import orjson

    messages = make_messages(n)
    for i in range(0, n, 8):
        doc = orjson.loads(messages[i])
        doc["messageHeader"]["errorCode"] = "GENERR001"
        messages[i] = orjson.dumps(doc)
    for i in range(3, n, 200):
        messages[i] = messages[i][:-7]  # cut short: not JSON
    return prepare(messages, config)


def in_turn(spark: Any, config: LoaderConfig, root: str, prepared: Any) -> int:
    """The baseline: the batch's tables merged one after the other in one session."""
    inserted = 0
    for route, rows in lake.batch_tables(prepared, list(range(len(prepared.keys)))).items():
        df = shape(spark.createDataFrame(rows), config, prepared.parsed, keep=(lake.KEY,), routed=False)
        inserted += lake.merge(spark, df, rows.num_rows, lake.table_path(root, route), config.partition_by, None)
    return inserted


def at_once(spark: Any, config: LoaderConfig, root: str, prepared: Any) -> int:
    """The loader's way (:func:`lake.commit_batch`): the tables merged at the same time."""
    return lake.commit_batch(spark, config, root, prepared, list(range(len(prepared.keys))))["total"]


ARMS = {"at once (loader)": at_once, "one after the other": in_turn}


def tables_cold(arm: str, n: int, master: str) -> None:
    """One arm's first batch in a new JVM (the session already started), for ``--tables``."""
    spark = session(master, {})
    config = LoaderConfig(output="unused", format="delta", rdss=True).check()
    prepared = mixed_batch(n, config)
    with tempfile.TemporaryDirectory(prefix="bench-lake-cold-") as root:
        t0 = time.perf_counter()
        inserted = ARMS[arm](spark, config, root, prepared)
        print(f"{time.perf_counter() - t0:.3f} {inserted}")
    spark.stop()


def tables(rounds: int, cold: int, n: int, master: str) -> None:
    """``--tables``: both arms, warm batch after batch in turn, then cold in new JVMs in turn."""
    spark = session(master, {})
    config = LoaderConfig(output="unused", format="delta", rdss=True).check()
    prepared = mixed_batch(n, config)
    roots = {arm: tempfile.mkdtemp(prefix="bench-lake-tables-") for arm in ARMS}
    warm: dict[str, list[float]] = {arm: [] for arm in ARMS}
    try:
        for r in range(rounds + 1):
            for arm, write in ARMS.items() if r % 2 else reversed(ARMS.items()):
                batch = fresh(prepared, r)
                t0 = time.perf_counter()
                inserted = write(spark, config, roots[arm], batch)
                if r:  # round 0 creates the tables and warms up
                    warm[arm].append(time.perf_counter() - t0)
                assert inserted == len(set(batch.keys)), (arm, inserted)
    finally:
        spark.stop()
        for root in roots.values():
            shutil.rmtree(root, ignore_errors=True)
    first: dict[str, list[float]] = {arm: [] for arm in ARMS}
    for i in range(cold):
        for arm in ARMS if i % 2 else reversed(list(ARMS)):
            out = subprocess.run([sys.executable, __file__, "--tables-cold", arm, "--small", str(n), "--master", master],
                                 capture_output=True, text=True, check=True).stdout  # fmt: skip
            first[arm].append(float(out.split()[-2]))
    routes = sorted({r for r in prepared.routes or []})
    print(f"{n} messages per batch into {len(routes)} tables ({', '.join(routes)}), {master}:")
    for arm in ARMS:
        ts, cs = warm[arm], first[arm]
        print(f"  {arm:22} warm: median {statistics.median(ts):.2f} s, min {min(ts):.2f} s ({len(ts)} batches)"
              + (f"; first batch in a new JVM: median {statistics.median(cs):.2f} s ({len(cs)} JVMs)" if cs else ""))  # fmt: skip


def bare_merge(spark: Any, config: LoaderConfig, root: str, prepared: Any) -> int:
    """The floor: what a PySpark user writes without etlstage — each table's Arrow rows
    (the same as the loader's) through createDataFrame, then ``MERGE INTO … WHEN NOT
    MATCHED THEN INSERT *``, one table after the other; the first batch creates the tables
    the way the loader does (a MERGE needs a table)."""
    inserted = 0
    for route, rows in lake.batch_tables(prepared, list(range(len(prepared.keys)))).items():
        path = lake.table_path(root, route)
        df = spark.createDataFrame(rows)
        if path not in _BARE_TABLES:  # a local path or s3a://
            df.write.format("delta").save(path)
            _BARE_TABLES.add(path)
            inserted += rows.num_rows
            continue
        df.createOrReplaceTempView("bare_batch")
        done = spark.sql(
            f"MERGE INTO delta.`{path}` AS t USING bare_batch AS s ON t._key = s._key WHEN NOT MATCHED THEN INSERT *"
        ).collect()
        inserted += int(done[0]["num_inserted_rows"])
    return inserted


_BARE_TABLES: set[str] = set()  # the floor's tables, created by its first batch


def loader_in_task(spark: Any, config: LoaderConfig, root: str, prepared: Any) -> int:
    """The loader with its source as it was: createDataFrame, the rows inside the task."""
    before = lake.reads_local_files
    lake.reads_local_files = lambda _spark: False  # type: ignore[assignment]
    try:
        return at_once(spark, config, root, prepared)
    finally:
        lake.reads_local_files = before  # type: ignore[assignment]


FLOOR_ARMS = {"loader": at_once, "loader, rows in the task": loader_in_task, "bare MERGE (floor)": bare_merge}


def last_job(spark: Any) -> int:
    return max(spark.sparkContext.statusTracker().getJobIdsForGroup(None) or [-1])


def floor(rounds: int, sizes: list[int], master: str, s3: bool = False) -> None:
    """``--floor``: the loader's batch (three RDSS tables) against a bare PySpark insert-only
    MERGE of the same rows into tables of its own, warm, batch after batch in turn (the
    order turned each round), with the Spark jobs each ran; per batch size. ``s3``: the
    tables on S3 (moto's server on loopback) instead of local disk."""
    with contextlib.ExitStack() as stack:
        s3_conf: dict[str, str] = {}
        if s3:
            from tests.support.s3 import moto_s3

            server = stack.enter_context(moto_s3(Path(tempfile.mkdtemp(prefix="bench-lake-s3-"))))
            server.create_bucket("bench")
            os.environ.update(server.env())
            s3_conf = server.spark_conf()
        _floor(rounds, sizes, master, s3_conf, "S3 (moto)" if s3 else "local disk")


def _floor(rounds: int, sizes: list[int], master: str, s3_conf: dict[str, str], where: str) -> None:
    spark = session(master, s3_conf)
    config = LoaderConfig(output="unused", format="delta", rdss=True).check()
    try:
        for n in sizes:
            prepared = mixed_batch(n, config)
            if s3_conf:
                roots = {arm: f"s3a://bench/floor-{n}-{k}" for k, arm in enumerate(FLOOR_ARMS)}
            else:
                roots = {arm: tempfile.mkdtemp(prefix="bench-lake-floor-") for arm in FLOOR_ARMS}
            warm: dict[str, list[float]] = {arm: [] for arm in FLOOR_ARMS}
            jobs: dict[str, list[int]] = {arm: [] for arm in FLOOR_ARMS}
            for r in range(rounds + 2):
                for arm, write in FLOOR_ARMS.items() if r % 2 else reversed(FLOOR_ARMS.items()):
                    batch = fresh(prepared, n * 1000 + r)
                    first = last_job(spark)
                    t0 = time.perf_counter()
                    inserted = write(spark, config, roots[arm], batch)
                    if r >= 2:  # rounds 0 and 1 create the tables and warm up
                        warm[arm].append(time.perf_counter() - t0)
                        jobs[arm].append(last_job(spark) - first)
                    assert inserted == len(set(batch.keys)), (arm, inserted)
            for root in roots.values():
                if not s3_conf:
                    shutil.rmtree(root, ignore_errors=True)
            bare = statistics.median(warm["bare MERGE (floor)"])
            print(f"{n} messages per batch, three tables on {where}, {master}, {rounds} batches each:")
            for arm, ts in warm.items():
                print(f"  {arm:26} median {statistics.median(ts):.2f} s (min {min(ts):.2f}), "
                      f"{statistics.median(jobs[arm]):.0f} Spark jobs, {statistics.median(ts) / bare:.2f}x the floor",
                      flush=True)  # fmt: skip
    finally:
        spark.stop()


def stock(fmt: str) -> float:
    """Seconds of one whole ``etlstage run --once`` of the stock pipeline loading ``fmt``."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    with tempfile.TemporaryDirectory(prefix="bench-lake-stock-") as tmp:
        text = (root / "stages.yaml").read_text().replace("--format, delta", f"--format, {fmt}")
        Path(tmp, "stages.yaml").write_text(text)
        seconds, _ = timed_run(Path(tmp), [])
    return seconds


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--stock", action="store_true", help="the stock pipeline, Delta against Parquet")
    ap.add_argument("--small", type=int, default=5000)
    ap.add_argument("--large", type=int, default=50000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--no-s3", action="store_true")
    ap.add_argument("--s3", action="store_true", help="--floor: the tables on S3 (moto) instead of local disk")
    ap.add_argument("--ab", metavar="KEY=VALUE", help="the MERGE with this Spark setting against without it")
    ap.add_argument("--base", metavar="KEY=VALUE", default="", help="--ab: settings every row runs with")
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--tables", action="store_true", help="the tables of a batch merged at once against in turn")
    ap.add_argument("--cold", type=int, default=3, help="--tables: first batches in new JVMs, per arm")
    ap.add_argument("--tables-cold", metavar="ARM", help=argparse.SUPPRESS)
    ap.add_argument("--floor", action="store_true", help="the loader's batch against a bare PySpark MERGE")
    ap.add_argument("--sizes", default="5000,50000", help="--floor: messages per batch, comma-separated")
    a = ap.parse_args()
    if a.floor:
        floor(a.rounds, [int(n) for n in a.sizes.split(",")], a.master, a.s3)
        return
    if a.tables_cold:
        tables_cold(a.tables_cold, a.small, a.master)
        return
    if a.tables:
        tables(a.rounds, a.cold, a.small, a.master)
        return
    if a.ab:
        ab(a.ab, a.rounds, a.small, a.master, a.base)
        return
    if a.stock:
        for fmt in ("delta", "parquet"):
            seconds = stock(fmt)
            print(f"stock pipeline, {fmt}: 5,000 messages in {seconds:.1f} s ({5000 / seconds:.0f} messages/s)")
        return

    stores: dict[str, str] = {"local": tempfile.mkdtemp(prefix="bench-lake-")}
    s3_conf: dict[str, str] = {}
    server = None
    if not a.no_s3:
        from tests.support.s3 import moto_s3

        server = moto_s3(Path(tempfile.mkdtemp(prefix="bench-lake-s3-")))
        s3 = server.__enter__()
        s3.create_bucket("bench")
        os.environ.update(s3.env())
        s3_conf = s3.spark_conf()
        stores["s3"] = "s3a://bench/lake"
    spark = session(a.master, s3_conf)
    config = LoaderConfig(output="unused", format="delta", rdss=True).check()
    messages = make_messages(a.large)
    small, large = prepare(messages[: a.small], config), prepare(messages, config)
    results: dict[tuple[str, str], tuple[float, float]] = {}
    version = 0
    try:
        for store, base in stores.items():
            for name, write in writers(spark, config).items():
                root = f"{base}/{name.replace(' ', '-')}"
                t_small = measure(write, small, root, a.repeat, version)
                t_large = measure(write, large, root, a.repeat, version + 100)
                version += 1000
                per = (t_large - t_small) / (a.large - a.small)
                results[(store, name)] = (t_small - a.small * per, per)
                print(f"{store:6} {name:13} {a.small}: {t_small:6.2f} s  {a.large}: {t_large:6.2f} s  "
                      f"fixed {t_small - a.small * per:5.2f} s/batch  {per * 1e6:6.1f} µs/message", flush=True)  # fmt: skip
    finally:
        spark.stop()
        if server is not None:
            server.__exit__(None, None, None)
        shutil.rmtree(stores["local"], ignore_errors=True)
    for store in stores:
        ratio = results[(store, "delta merge")][0] / max(results[(store, "parquet")][0], 1e-9)
        print(f"{store}: Delta MERGE fixed cost per batch = {ratio:.1f}x plain Parquet's")


if __name__ == "__main__":
    main()
