"""The stock Spark-backed L-worker (``etlstage-spark-load``).

Each batch is de-duplicated by key against a SQLite key index, staged, written by Spark
into a staging directory, then published into the output dataset by atomic renames:
stage, record, publish, and recover on start-up (see ``docs/workers/spark.md``).
"""
