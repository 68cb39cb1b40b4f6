"""The leanest PySpark streaming job that reads a source and appends its records: Spark's
own text-file source and a ``foreachBatch`` writer, so no Python process is started beyond
this one (the batch function runs here, over the gateway).

    python bench/workers/spark_lean_floor_job.py OUT COUNT

Writes ``COUNT`` numbers as a text file into a temporary folder first, then reads that
folder as a stream on ``local[2]`` (UI off), ``availableNow``, and appends each micro-batch's
lines to ``OUT``.  ``bench/spark_floor.py`` times it beside etlstage and the Python-source
floor (``spark_floor_job.py``).
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession

OUT, COUNT = sys.argv[1], int(sys.argv[2])


def append(batch: DataFrame, batch_id: int) -> None:
    with open(OUT, "a") as out:
        for row in batch.collect():
            out.write(f"{row.value}\n")


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="spark-lean-floor-") as work:
        source = Path(work) / "in"
        source.mkdir()
        (source / "numbers.txt").write_text("".join(f"{n}\n" for n in range(COUNT)))
        spark = SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false").getOrCreate()
        spark.sparkContext.setLogLevel("WARN")
        query = (
            spark.readStream.format("text").load(str(source))
            .writeStream.foreachBatch(append)
            .option("checkpointLocation", str(Path(work) / "checkpoint"))
            .trigger(availableNow=True)
            .start()
        )  # fmt: skip
        query.awaitTermination()
        spark.stop()


if __name__ == "__main__":
    main()
