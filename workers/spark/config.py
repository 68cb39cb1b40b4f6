"""The loader's settings, checked as a whole: every problem is reported at once."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from etlstage_workers.spark import rdss

from etlstage.errors import ConfigError
from etlstage.protocol.pointer import parse_pointer

FORMATS = ("delta", "parquet", "json", "orc", "csv")
TABLE_FORMATS = ("delta",)  # committed by the table's own transaction: any Hadoop file system URI
COLUMN_TYPES = ("string", "long", "double", "boolean")
MASTER_FORMS = "local, local[N], local[*], spark://host:port, sc://host:port, yarn, k8s://…"
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
S3_SCHEMES = ("s3a", "s3")  # Delta's default log store there: one writing driver at a time per table
DYNAMODB_LOG_STORE = "io.delta.storage.S3DynamoDBLogStore"
_DDB_CONF = "spark.io.delta.storage.S3DynamoDBLogStore"  # Delta reads ddb.* settings under this prefix
_DDB_TABLE = re.compile(r"^[A-Za-z0-9_.-]{3,255}$")  # DynamoDB's rule for table names
_REGION = re.compile(r"^[a-z]{2}(-[a-z]+)+-\d+$")
_MASTER = re.compile(r"^(local(\[(\d+|\*)(,\d+)?\])?|spark://.+|sc://.+|yarn|k8s://.+|local-cluster\[.+\])$")


@dataclass(frozen=True)
class Column:
    """One output column: ``name``, the JSON pointer it comes from, its type.

    A ``string`` column of an object or array holds that value's JSON text.
    """

    name: str
    pointer: str
    type: str = "string"

    @property
    def tokens(self) -> tuple[str, ...]:
        return parse_pointer(self.pointer)


def parse_column(spec: str) -> Column:
    """``name=/pointer`` or ``name:type=/pointer``.

    >>> parse_column("id:long=/header/id")
    Column(name='id', pointer='/header/id', type='long')
    """
    name, sep, pointer = spec.partition("=")
    if not sep:
        raise ValueError(f"column {spec!r}: expected name=/json/pointer or name:type=/json/pointer")
    name, _, ctype = name.partition(":")
    ctype = ctype or "string"
    if not _NAME.match(name):
        raise ValueError(f"column {spec!r}: name {name!r} must be letters, digits, underscore")
    if ctype not in COLUMN_TYPES:
        raise ValueError(f"column {spec!r}: type {ctype!r}, expected one of {', '.join(COLUMN_TYPES)}")
    try:
        parse_pointer(pointer)
    except ValueError as exc:
        raise ValueError(f"column {spec!r}: {exc}") from None
    if pointer == "":
        raise ValueError(f"column {spec!r}: the whole document is not a column; point at a member")
    return Column(name, pointer, ctype)


@dataclass(frozen=True)
class LoaderConfig:
    output: str
    format: str = "parquet"
    columns: tuple[Column, ...] = ()
    rdss: bool = False
    key: str | None = None
    partition_by: tuple[str, ...] = ()
    master: str = "local[*]"
    conf: dict[str, str] = field(default_factory=dict)
    state_dir: str = ""
    app_name: str = "etlstage-spark-load"
    connect_timeout: float = 10.0
    claim_timeout: float = 120.0
    spark_log_level: str = "WARN"
    log_table: str = ""  # --dynamodb-log-table: Delta's DynamoDB log store (several writers of an S3 table)
    log_table_region: str = ""  # --dynamodb-region: where that table is (Delta's default: us-east-1)

    @property
    def on_s3(self) -> bool:
        """The output is on S3 (``s3a://``, ``s3://``)."""
        return self.output.split("://", 1)[0].lower() in S3_SCHEMES if "://" in self.output else False

    def log_store_conf(self) -> dict[str, str]:
        """Spark settings of Delta's DynamoDB log store for the output's scheme (none without
        ``--dynamodb-log-table``). The settings are the session's: every ``s3a://`` (or
        ``s3://``) Delta table it writes or reads goes through that DynamoDB table."""
        if not self.log_table:
            return {}
        scheme = self.output.split("://", 1)[0].lower()
        conf = {
            f"spark.delta.logStore.{scheme}.impl": DYNAMODB_LOG_STORE,
            f"{_DDB_CONF}.ddb.tableName": self.log_table,
        }
        if self.log_table_region:
            conf[f"{_DDB_CONF}.ddb.region"] = self.log_table_region
        return conf

    def concurrent_writers_problem(self, instances: int) -> str | None:
        """Why a stage of ``instances`` instances may not write this output, or None (the
        caller names the stage).

        The one rule both engines apply at start: a Delta table on S3 written by more than one
        instance needs Delta's DynamoDB log store. Without it two writers may both put the
        same ``_delta_log/N.json`` (S3 has no put-if-absent there) and one commit is lost
        without an error."""
        if instances <= 1 or not self.is_table or not self.on_s3 or self.log_table:
            return None
        return (
            f"{instances} instances would write the Delta table {self.output} at once, and on "
            "S3 Delta's default log store is safe for one writer only (two commits of the same number: one is "
            "lost without an error); add --dynamodb-log-table NAME (Delta's DynamoDB log store; see "
            'docs/workers/spark.md, "Concurrent writers") or give the stage instances: 1'
        )

    @property
    def is_table(self) -> bool:
        """Written as a Delta table (:mod:`.lake`), not as files published by renames."""
        return self.format in TABLE_FORMATS

    @property
    def key_pointer(self) -> str | None:
        return self.key if self.key is not None else (rdss.KEY_POINTER if self.rdss else None)

    @property
    def output_columns(self) -> tuple[Column, ...]:
        if self.rdss:
            return tuple(Column(n, p, t) for n, p, t in rdss.COLUMNS)
        return self.columns

    def check(self) -> LoaderConfig:
        problems = []
        if not self.output:
            problems.append("--output: a directory for the dataset is required")
        if self.format not in FORMATS:
            problems.append(f"--format {self.format!r}: expected one of {', '.join(FORMATS)}")
        elif "://" in self.output and self.format not in TABLE_FORMATS:
            problems.append(
                f"--output {self.output!r}: --format {self.format} publishes files by renames on a local or "
                "mounted path; a file system URI (s3a://, hdfs://, ...) needs --format delta"
            )
        if self.rdss and self.columns:
            problems.append("--columns and --rdss: RDSS mode has fixed columns; give one or the other")
        if not self.rdss and not self.columns:
            problems.append("--columns: give at least one name=/json/pointer (or use --rdss)")
        names = [c.name for c in self.output_columns] + (["raw"] if self.rdss else [])
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            problems.append(f"--columns: duplicate column names {', '.join(dupes)}")
        for p in self.partition_by:
            if p not in names:
                problems.append(f"--partition-by {p!r}: not an output column (columns: {', '.join(names)})")
        if self.key is not None:
            try:
                parse_pointer(self.key)
            except ValueError as exc:
                problems.append(f"--key: {exc}")
        if not _MASTER.match(self.master):
            problems.append(f"--master {self.master!r}: expected one of {MASTER_FORMS}")
        for k in self.conf:
            if not k:
                problems.append("--conf: expected key=value")
        if self.log_table or self.log_table_region:
            if not self.is_table or not self.on_s3:
                problems.append(
                    "--dynamodb-log-table / --dynamodb-region: Delta's DynamoDB log store is for --format delta "
                    f"on s3a:// or s3://, not --format {self.format} --output {self.output!r}"
                )
            if not self.log_table:
                problems.append("--dynamodb-region: give the table too (--dynamodb-log-table NAME)")
            elif not _DDB_TABLE.match(self.log_table):
                problems.append(
                    f"--dynamodb-log-table {self.log_table!r}: a DynamoDB table name is 3 to 255 letters, digits, "
                    "'_', '-' or '.'"
                )
            if self.log_table_region and not _REGION.match(self.log_table_region):
                problems.append(f"--dynamodb-region {self.log_table_region!r}: expected an AWS region, e.g. eu-west-1")
        if self.connect_timeout <= 0 or self.claim_timeout <= 0:
            problems.append("--connect-timeout / --claim-timeout: expected seconds > 0")
        _check_column_tree(self.output_columns, problems)
        if problems:
            raise ConfigError(problems, "etlstage-spark-load")
        return self


def _check_column_tree(columns: tuple[Column, ...], problems: list[str]) -> None:
    """Two pointers may not use one path both as a leaf and as a parent."""
    leaves = {c.tokens: c for c in columns}
    for c in columns:
        for depth in range(1, len(c.tokens)):
            parent = leaves.get(c.tokens[:depth])
            if parent is not None:
                problems.append(
                    f"--columns: {c.name!r} ({c.pointer}) reaches inside {parent.name!r} ({parent.pointer}); "
                    "take the outer value as JSON text or the inner one, not both"
                )
