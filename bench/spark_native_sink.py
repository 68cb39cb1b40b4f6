"""What the native sink's key lookup costs as the key dataset grows.

    python bench/spark_native_sink.py [--batch 5000] [--repeat 5]

For 10^4, 10^5 and 10^6 keys already loaded (one compacted file, then the same keys in 64
batch files, the most there are between compactions), the seconds to decide which of a
batch's keys are new (``native_sink._known``: read the key dataset, Arrow's ``is_in``).
The baseline, in the same run, is the same batch with no key dataset (nothing to read).
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
import uuid

import pyarrow as pa
import pyarrow.parquet as pq
from etlstage_workers.spark.native_sink import KEYS, _known


def keys(n: int) -> pa.Array:
    return pa.array([str(uuid.uuid4()) for _ in range(n)], pa.string())


def timed(output: str, batch: pa.Array, repeat: int) -> float:
    runs = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        known = _known(output, batch)
        runs.append(time.perf_counter() - t0)
        assert not any(known)
    return statistics.median(runs)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=5000)
    ap.add_argument("--repeat", type=int, default=5)
    a = ap.parse_args()
    batch = keys(a.batch)
    print(f"batch of {a.batch:,} new keys; seconds to look them up (median of {a.repeat})")
    with tempfile.TemporaryDirectory() as tmp:
        print(f"  {'no key dataset (baseline)':<36} {timed(os.path.join(tmp, 'none'), batch, a.repeat):8.4f}")
        for n in (10_000, 100_000, 1_000_000):
            loaded = keys(n)
            for files in (1, 64):
                out = os.path.join(tmp, f"{n}-{files}")
                os.makedirs(os.path.join(out, KEYS))
                step = -(-n // files)
                for i in range(files):
                    part = pa.table({"key": loaded.slice(i * step, step)})
                    pq.write_table(part, os.path.join(out, KEYS, f"spark-{i}.parquet"))
                label = f"{n:,} keys in {files} file{'s' if files > 1 else ''}"
                print(f"  {label:<36} {timed(out, batch, a.repeat):8.4f}")


if __name__ == "__main__":
    main()
