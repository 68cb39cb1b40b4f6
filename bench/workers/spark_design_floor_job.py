"""The Spark engine's design with etlstage taken out, at steady state (bench/spark_pipe.py).

    python spark_design_floor_job.py MASTER INPUT PARTITIONS BATCH_LINES PROGRAM [ARG ...]

The shape docs/spark-engine.md gives the engine, at its leanest: a Python streaming data
source plans micro-batches of about BATCH_LINES of INPUT's lines and hands each of its
PARTITIONS tasks a byte range (as the engine's source hands its tasks spool files); a
Python Arrow streaming writer's task reads its range from the file itself and pipes it
through PROGRAM, counting the lines it writes back (as the engine's writer task drives its
T and L). No protocol, no windows, no acknowledgements, no replay: one program per task,
its stdin closed at the range's end, as ``RDD.pipe()`` runs one per partition.

Prints ``session S`` (seconds to a session) and ``job S COUNT`` (the query alone)."""

from __future__ import annotations

import itertools
import os
import shlex
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql import SparkSession
from pyspark.sql.datasource import (
    DataSource,
    DataSourceStreamArrowWriter,
    DataSourceStreamReader,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.streaming.datasource import ReadLimit, SupportsTriggerAvailableNow

CHUNK = 1 << 20


def line_end(path: str, pos: int, size: int) -> int:
    """The first position at or after ``pos`` that starts a line (or the file's end)."""
    if pos <= 0 or pos >= size:
        return min(max(pos, 0), size)
    with open(path, "rb") as f:
        f.seek(pos - 1)
        return pos - 1 + len(f.readline())


class DesignFloor(DataSource):
    @classmethod
    def name(cls) -> str:
        return "design_floor"

    def schema(self) -> str:
        return "first long, stop long"

    def streamReader(self, schema: object) -> DataSourceStreamReader:
        o = self.options
        return RangeReader(o["path"], int(o["parts"]), int(o["batch_bytes"]))

    def streamWriter(self, schema: object, overwrite: bool) -> DataSourceStreamArrowWriter:
        o = self.options
        return PipeWriter(o["path"], shlex.split(o["program"]), o["counts"])


class RangeReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, path: str, parts: int, batch_bytes: int) -> None:
        self.path, self.parts, self.batch_bytes = path, parts, batch_bytes
        self.size = os.path.getsize(path)

    def initialOffset(self) -> dict:
        return {"pos": 0}

    def prepareForTriggerAvailableNow(self) -> None:
        pass

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        return {"pos": line_end(self.path, start["pos"] + self.batch_bytes, self.size)}

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        first, stop = start["pos"], end["pos"]
        step = (stop - first) // self.parts
        cuts = [first] + [line_end(self.path, first + i * step, stop) for i in range(1, self.parts)] + [stop]
        return [InputPartition((a, b)) for a, b in itertools.pairwise(cuts) if b > a]

    def read(self, partition: InputPartition) -> Iterator[tuple[int, int]]:
        yield partition.value

    def commit(self, end: dict) -> None:
        pass


@dataclass
class Counted(WriterCommitMessage):
    lines: int


class PipeWriter(DataSourceStreamArrowWriter):
    def __init__(self, path: str, program: list[str], counts: str) -> None:
        self.path, self.program, self.counts = path, program, counts

    def write(self, iterator: Iterator[pa.RecordBatch]) -> Counted:
        ranges = [r for batch in iterator for r in zip(*(c.to_pylist() for c in batch.columns), strict=True)]
        proc = subprocess.Popen(self.program, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        assert proc.stdin and proc.stdout
        feeder = threading.Thread(target=self._feed, args=(proc.stdin, ranges))
        feeder.start()
        lines = 0
        while chunk := proc.stdout.read(CHUNK):
            lines += chunk.count(b"\n")
        feeder.join()
        if proc.wait() != 0:
            raise RuntimeError(f"{self.program} exited {proc.returncode}")
        return Counted(lines)

    def _feed(self, stdin: object, ranges: list[tuple[int, int]]) -> None:
        with open(self.path, "rb") as f, stdin as out:  # type: ignore[attr-defined]
            for first, stop in ranges:
                f.seek(first)
                left = stop - first
                while left > 0:
                    chunk = f.read(min(CHUNK, left))
                    out.write(chunk)
                    left -= len(chunk)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        total = sum(m.lines for m in messages if isinstance(m, Counted))
        with open(self.counts, "a") as f:  # commit runs in a process of its own on the driver
            f.write(f"{batchId} {total}\n")

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        pass


def main() -> None:
    master, path, parts, batch_lines, *program = sys.argv[1:]
    t0 = time.perf_counter()
    spark = (
        SparkSession.builder.master(master)
        .appName("bench-design-floor")
        .config("spark.ui.enabled", "false")
        .getOrCreate()
    )  # fmt: skip
    spark.sparkContext.setLogLevel("ERROR")
    print(f"session {time.perf_counter() - t0:.3f}", flush=True)
    spark.dataSource.register(DesignFloor)
    with open(path, "rb") as f:
        line_bytes = len(f.readline())
    with tempfile.TemporaryDirectory(prefix="spark-design-floor-") as tmp:
        counts = os.path.join(tmp, "counts")
        options = {
            "path": path,
            "parts": parts,
            "batch_bytes": str(int(batch_lines) * line_bytes),
            "program": shlex.join(program),
            "counts": counts,
        }
        t1 = time.perf_counter()
        query = (
            spark.readStream.format("design_floor").options(**options).load()
            .writeStream.format("design_floor").options(**options)
            .option("checkpointLocation", os.path.join(tmp, "checkpoint"))
            .trigger(availableNow=True)
            .start()
        )  # fmt: skip
        query.awaitTermination()
        elapsed = time.perf_counter() - t1
        with open(counts) as f:
            count = sum(int(line.split()[1]) for line in f)
    print(f"job {elapsed:.3f} {count}", flush=True)
    spark.stop()


if __name__ == "__main__":
    main()
