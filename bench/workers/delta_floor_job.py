"""The least a Spark-backed Delta loader's run can cost, with none of etlstage in it.

    python bench/workers/delta_floor_job.py OUT COUNT

A PySpark session on ``local[*]`` with the loader's Delta jars and session settings
(``workers/spark/lake.py``: ``session_conf``), ``COUNT`` rows of ~1 KB written as the
first commit of one new Delta table at ``OUT``, then ``spark.stop()``.  The stock demo
writes three tables, parses and dedupes its messages: this is a floor under it, not the
same work.  ``bench/demo_time.py --floor`` times it beside the demo.
"""

from __future__ import annotations

import sys

from etlstage_workers.spark.config import LoaderConfig
from etlstage_workers.spark.lake import session_conf
from pyspark.sql import SparkSession

OUT, COUNT = sys.argv[1], int(sys.argv[2])


def main() -> None:
    builder = SparkSession.builder.master("local[*]").config("spark.ui.enabled", "false")
    for key, value in session_conf(LoaderConfig(output=OUT, format="delta")).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    rows = spark.range(COUNT).selectExpr("cast(id as string) as _key", "repeat('x', 1000) as body")
    rows.write.format("delta").save(OUT)
    spark.stop()


if __name__ == "__main__":
    main()
