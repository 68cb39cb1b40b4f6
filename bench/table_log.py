"""What the tables' ``_spark_metadata`` log adds to publishing a batch, as a table grows.

    python bench/table_log.py [--files 3] [--repeat 5]

For tables already holding 10^3, 10^4 and 10^5 logged files, the milliseconds to log one
batch of ``--files`` files: an ordinary log file (nine batches in ten) and a compaction
(every tenth: it lists every file of the table). The baseline, in the same run, is the
rest of the publish: renaming the batch's files into the table and syncing the folders.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time

from etlstage_workers.spark import table_log

from etlstage.state.durable import fsync_path


def seeded(table: str, existing: int) -> None:
    """A table whose log's last compaction (id 9) lists ``existing`` files."""
    folder = os.path.join(table, table_log.METADATA)
    os.makedirs(folder)
    entry = {"size": 4096, "isDir": False, "modificationTime": 0, "blockReplication": 1, "blockSize": 33554432}
    lines = ["v1"] + [
        json.dumps({"path": f"file://{table}/part-old-{i:07d}.parquet", **entry, "action": "add"})
        for i in range(existing)
    ]
    with open(os.path.join(folder, "9.compact"), "w") as f:
        f.write("\n".join(lines))


def batch_files(root: str, name: str, n: int) -> tuple[list[str], list[str]]:
    """``n`` staged files of 4 KB and the table paths they are renamed to."""
    staged, published = [], []
    for i in range(n):
        src = os.path.join(root, "_staging", name, f"part-{i:05d}.parquet")
        os.makedirs(os.path.dirname(src), exist_ok=True)
        with open(src, "wb") as f:
            f.write(os.urandom(4096))
        staged.append(src)
        published.append(os.path.join(root, "valid", f"part-{name}-{i:05d}.parquet"))
    return staged, published


def renames(staged: list[str], published: list[str]) -> float:
    t0 = time.perf_counter()
    for src, dest in zip(staged, published, strict=True):
        os.replace(src, dest)
    fsync_path(os.path.dirname(published[0]), directory=True)
    return time.perf_counter() - t0


def one(existing: int, files: int, compaction: bool) -> tuple[float, float]:
    with tempfile.TemporaryDirectory() as root:
        table = os.path.join(root, "valid")
        seeded(table, existing)
        first = 10
        if compaction:  # logs 10..18 exist: the next one, 19, is a compaction
            for n in range(10, 19):
                staged, published = batch_files(root, f"b{n}", files)
                renames(staged, published)
                table_log.append(table, published, f"b{n}", n - 1, set())
            first = 19
        staged, published = batch_files(root, f"b{first}", files)
        base = renames(staged, published)
        t0 = time.perf_counter()
        log_id = table_log.append(table, published, f"b{first}", first - 1, set())
        logged = time.perf_counter() - t0
        assert log_id == first
        return logged, base


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--files", type=int, default=3, help="files per batch in the table")
    ap.add_argument("--repeat", type=int, default=5)
    a = ap.parse_args()
    print(f"{'files in the table':>18} {'renames (baseline)':>19} {'log':>9} {'compaction':>11}")
    for existing in (1_000, 10_000, 100_000):
        plain = [one(existing, a.files, False) for _ in range(a.repeat)]
        compacted = [one(existing, a.files, True) for _ in range(a.repeat)]
        base = statistics.median([b for _, b in plain + compacted])
        log_ms = statistics.median([t for t, _ in plain])
        compact_ms = statistics.median([t for t, _ in compacted])
        print(f"{existing:>18,} {base * 1e3:>16.2f} ms {log_ms * 1e3:>6.2f} ms {compact_ms * 1e3:>8.1f} ms")


if __name__ == "__main__":
    main()
