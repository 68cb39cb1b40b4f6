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
