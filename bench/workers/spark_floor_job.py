"""Spark's own floor for a streaming run: what any engine built on PySpark pays before its
first record, with none of etlstage in it.

    python bench/workers/spark_floor_job.py OUT COUNT

A SparkSession on ``local[2]`` (its UI off, as the engine's), a Python streaming source
giving ``COUNT`` numbers in one micro-batch, a Python streaming writer appending them to
``OUT`` as lines, ``availableNow``, checkpoint in a temporary folder: the shape of
``etlstage run --engine spark --once`` for an E → L pipeline, less the workers, the state
and the pre-flight job.  ``bench/spark_floor.py`` times it beside etlstage.
"""

from __future__ import annotations

import sys
import tempfile
from collections.abc import Iterator

from pyspark.sql import SparkSession
from pyspark.sql.datasource import (
    DataSource,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.streaming.datasource import ReadLimit, SupportsTriggerAvailableNow

OUT, COUNT = sys.argv[1], int(sys.argv[2])


class Numbers(DataSource):
    @classmethod
    def name(cls) -> str:
        return "floor_numbers"

    def schema(self) -> str:
        return "line string"

    def streamReader(self, schema: object) -> DataSourceStreamReader:
        return NumbersReader()

    def streamWriter(self, schema: object, overwrite: bool) -> DataSourceStreamWriter:
        return LinesWriter()


class NumbersReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def initialOffset(self) -> dict:
        return {"n": 0}

    def prepareForTriggerAvailableNow(self) -> None:
        pass

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        return {"n": COUNT}

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        return [InputPartition((start["n"], end["n"]))]

    def read(self, partition: InputPartition) -> Iterator[tuple[str]]:
        first, end = partition.value
        for n in range(first, end):
            yield (str(n),)

    def commit(self, end: dict) -> None:
        pass


class LinesWriter(DataSourceStreamWriter):
    def write(self, rows: Iterator[object]) -> WriterCommitMessage:
        with open(OUT, "a") as out:
            for row in rows:
                out.write(f"{row.line}\n")  # type: ignore[attr-defined]
        return WriterCommitMessage()

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        pass

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        pass


def main() -> None:
    spark = SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false").getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    spark.dataSource.register(Numbers)
    with tempfile.TemporaryDirectory(prefix="spark-floor-") as checkpoint:
        query = (
            spark.readStream.format("floor_numbers").load()
            .writeStream.format("floor_numbers")
            .option("checkpointLocation", checkpoint)
            .trigger(availableNow=True)
            .start()
        )  # fmt: skip
        query.awaitTermination()
    spark.stop()


if __name__ == "__main__":
    main()
