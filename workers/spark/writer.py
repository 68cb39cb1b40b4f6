"""The Spark job of one batch: read the staged Parquet, shape the columns, write the format.

A staged table either holds the output columns already (the Arrow fast path) or the raw
messages, parsed here with ``from_json`` against a schema built from the pointers (a
``string`` leaf holding an object or array receives its JSON text: Spark copies the
structure as text).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc
from etlstage_workers.spark.config import Column, LoaderConfig
from etlstage_workers.spark.extract import RAW, TABLE

if TYPE_CHECKING:
    from pyspark.sql import Column as SparkColumn
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType


def spark_schema(columns: tuple[Column, ...]) -> StructType:
    from pyspark.sql import types as T

    leaf_types = {"string": T.StringType(), "long": T.LongType(), "double": T.DoubleType(), "boolean": T.BooleanType()}
    tree: dict = {}
    for c in columns:
        node = tree
        for token in c.tokens[:-1]:
            node = node.setdefault(token, {})
        node[c.tokens[-1]] = leaf_types[c.type]

    def build(node: dict) -> StructType:
        return T.StructType([T.StructField(k, build(v) if isinstance(v, dict) else v) for k, v in node.items()])

    return build(tree)


def _path(parsed: SparkColumn, tokens: tuple[str, ...]) -> SparkColumn:
    col = parsed
    for token in tokens:
        col = col.getField(token)
    return col


def shape(
    df: DataFrame, config: LoaderConfig, parsed_already: bool, keep: Sequence[str] = (), routed: bool = True
) -> DataFrame:
    """The output columns, then ``keep`` (columns passed through as they are); ``routed``:
    RDSS rows keep their route column (one dataset partitioned by it, not a table each)."""
    from pyspark.sql import functions as F

    columns = config.output_columns
    # RDSS rows always arrive parsed (rdss_rows.py)
    extra = (["raw", TABLE] if routed else ["raw"]) if config.rdss else []
    if parsed_already:
        return df.select(*[c.name for c in columns], *extra, *keep)
    parsed = F.from_json(F.col(RAW), spark_schema(columns))
    return df.select(*[_path(parsed, c.tokens).alias(c.name) for c in columns], *keep)


def unique_columns(table: pa.Table, sample: int = 2000) -> list[str]:
    """Text columns whose values are (nearly) all distinct — ids, titles, bodies.

    Parquet's writer builds a dictionary for every column and drops it once it outgrows
    a page; for such columns that work is wasted (about a third of Spark's write time in
    bench/spark_load.py).  Judged on the first ``sample`` rows of the batch.
    """
    head = table.slice(0, sample)
    unique = []
    for name, column in zip(head.column_names, head.columns, strict=True):
        if not (pa.types.is_string(column.type) or pa.types.is_large_string(column.type)):
            continue
        present = len(column) - column.null_count
        if present and pc.count_distinct(column).as_py() > 0.9 * present:
            unique.append(name)
    return unique


_SPARK_TYPES = {pa.string(): "STRING", pa.int64(): "BIGINT", pa.float64(): "DOUBLE", pa.bool_(): "BOOLEAN"}


def read_schema(schema: pa.Schema) -> str:
    """The staged table's schema as Spark DDL: Spark then reads no footer and lists no
    directory to infer it (a fixed cost of every batch).

    >>> read_schema(pa.schema([("id", pa.string()), ("n", pa.int64())]))
    '`id` STRING, `n` BIGINT'
    """
    return ", ".join(f"`{f.name}` {_SPARK_TYPES[f.type]}" for f in schema)


def write_batch(
    spark: SparkSession,
    config: LoaderConfig,
    in_dir: str,
    out_dir: str,
    parsed_already: bool,
    no_dictionary: Sequence[str] = (),
    schema: pa.Schema | None = None,
) -> None:
    """``no_dictionary``: Parquet columns written without dictionary encoding (see :func:`unique_columns`);
    ``schema``: the staged table's (Arrow), so that Spark need not infer it."""
    reader = spark.read.schema(read_schema(schema)) if schema is not None else spark.read
    df = shape(reader.parquet(in_dir), config, parsed_already)
    partitions = ([TABLE] if config.rdss else []) + list(config.partition_by)
    writer = df.write.format(config.format).mode("overwrite")
    if config.format == "csv":
        writer = writer.option("header", "true")
    if config.format == "parquet":
        for name in no_dictionary:
            writer = writer.option(f"parquet.enable.dictionary#{name}", "false")
    if partitions:
        writer = writer.partitionBy(*partitions)
    writer.save(out_dir)
