"""Spark's own way to run an external program over data: ``RDD.pipe()`` (bench/spark_pipe.py).

    python spark_pipe_job.py MASTER INPUT PARTITIONS PROGRAM [ARG ...]

Reads INPUT's lines (``textFile``), pipes each partition through PROGRAM, counts what it
writes back. Prints ``session S`` (seconds to a session) and ``job S COUNT`` (the job alone).

With INPUT ``-``, each of the PARTITIONS partitions is one line, its number, and PROGRAM
makes its own data; COUNT is then the sum of the first field of each line it writes back
(bench/spark_pipe.py's chain arm: the counting loader reports its count)."""

import shlex
import sys
import time

from pyspark.sql import SparkSession

if __name__ == "__main__":
    master, path, parts, *program = sys.argv[1:]
    t0 = time.perf_counter()
    spark = (
        SparkSession.builder.master(master).appName("bench-rdd-pipe").config("spark.ui.enabled", "false").getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    print(f"session {time.perf_counter() - t0:.3f}", flush=True)
    t1 = time.perf_counter()
    sc = spark.sparkContext
    if path == "-":
        piped = sc.parallelize([str(p) for p in range(int(parts))], int(parts)).pipe(shlex.join(program))
        count = sum(int(line.split()[0]) for line in piped.collect())
    else:
        count = sc.textFile(path, int(parts)).pipe(shlex.join(program)).count()
    print(f"job {time.perf_counter() - t1:.3f} {count}", flush=True)
    spark.stop()
