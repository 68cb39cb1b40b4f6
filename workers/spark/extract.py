"""From a batch of raw messages to the Arrow table that is staged for Spark.

Fast path: the batch is joined with newlines and parsed by ``pyarrow.json`` in one
multi-threaded call, with an explicit schema holding only the pointers we need.  Any
batch it cannot take exactly (a message with a newline or not starting with ``{``, a
value of an unexpected JSON type, invalid JSON) goes the slow path: one parse per
message in Python for the keys, and Spark's ``from_json`` for the columns.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj
from etlstage_workers.spark.config import Column, LoaderConfig

from etlstage.errors import EtlstageError
from etlstage.protocol.pointer import MISSING, parse_pointer, resolve

try:
    from orjson import loads as json_loads
except ImportError:  # pragma: no cover - orjson is in the spark extra; json works, slower
    from json import loads as json_loads  # type: ignore[assignment]

RAW = "__raw"  # staged raw message, parsed by Spark's from_json
TABLE = "__table"  # RDSS route: valid / invalid / error

ARROW_TYPES = {"string": pa.string(), "long": pa.int64(), "double": pa.float64(), "boolean": pa.bool_()}


class BadMessage(EtlstageError, ValueError):
    """A message the configured mode cannot load (JSON mode: not a JSON object)."""


@dataclass
class Prepared:
    """A parsed batch: one key per message, the RDSS route, and the rows to stage."""

    keys: list[str]
    table: pa.Table  # output columns (``parsed``), or RAW for Spark's from_json
    parsed: bool  # True when ``table`` already holds the output columns
    routes: list[str] | None = None

    def take(self, positions: list[int]) -> pa.Table:
        return self.table.take(pa.array(positions, pa.int64()))


def content_key(message: bytes) -> str:
    """The key of a message without one: the same bytes are the same record."""
    return "sha256:" + hashlib.sha256(message).hexdigest()


def raw_strings(messages: list[bytes]) -> pa.Array:
    """Messages as a UTF-8 string column; bytes that are not UTF-8 are kept as ``\\xNN`` escapes."""
    binary = pa.array(messages, pa.binary())
    try:
        return binary.cast(pa.string())
    except pa.ArrowInvalid:
        return pa.array([m.decode("utf-8", "backslashreplace") for m in messages], pa.string())


def _schema(leaves: dict[tuple[str, ...], pa.DataType]) -> pa.Schema:
    tree: dict = {}
    for tokens, dtype in leaves.items():
        node = tree
        for token in tokens[:-1]:
            node = node.setdefault(token, {})
        node[tokens[-1]] = dtype

    def build(node: dict) -> list[pa.Field]:
        return [pa.field(k, pa.struct(build(v)) if isinstance(v, dict) else v) for k, v in node.items()]

    return pa.schema(build(tree))


def _leaf(table: pa.Table, tokens: tuple[str, ...]) -> pa.ChunkedArray:
    column = table.column(tokens[0])
    return pc.struct_field(column, list(tokens[1:])) if len(tokens) > 1 else column


def _fast_parse(messages: list[bytes], leaves: dict[tuple[str, ...], pa.DataType]) -> pa.Table | None:
    """The batch parsed in one call, or None when the fast path cannot take it exactly."""
    # Every message starts with "{", so each yields one row or more (or a parse error):
    # the row count equals the message count only if each message is exactly one row,
    # newlines inside messages included.
    if not all(m[:1] == b"{" for m in messages):
        return None
    joined = b"\n".join(messages)
    options = pj.ParseOptions(explicit_schema=_schema(leaves), unexpected_field_behavior="ignore")
    try:
        table = pj.read_json(pa.BufferReader(joined), parse_options=options)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return None
    return table if table.num_rows == len(messages) else None


def _keys_from(array: pa.ChunkedArray, messages: list[bytes]) -> list[str]:
    keys = array.to_pylist()
    return [k if k is not None else content_key(m) for k, m in zip(keys, messages, strict=True)]


def key_of(doc: object, tokens: tuple[str, ...] | None, message: bytes) -> str:
    """A row's ``--key``: the value at ``tokens`` (object members only: an array is a value),
    JSON text unless a string; the message's content hash when there is none."""
    value = resolve(doc, tokens, arrays=False) if tokens is not None else MISSING
    if value is MISSING or value is None:
        return content_key(message)
    if isinstance(value, str):
        return value
    return json.dumps(value, separators=(",", ":"), sort_keys=True)


def prepare_json(messages: list[bytes], config: LoaderConfig) -> Prepared:
    """JSON mode: ``--columns`` and ``--key``; a message that is not a JSON object is an error."""
    columns: tuple[Column, ...] = config.output_columns
    key_tokens = parse_pointer(config.key) if config.key is not None else None
    leaves = {c.tokens: ARROW_TYPES[c.type] for c in columns}
    if key_tokens is not None and key_tokens not in leaves:
        leaves[key_tokens] = pa.string()
    table = _fast_parse(messages, leaves)
    if table is not None:
        out = pa.table({c.name: _leaf(table, c.tokens) for c in columns})
        if key_tokens is None:
            keys = [content_key(m) for m in messages]
        elif leaves[key_tokens] == pa.string():
            keys = _keys_from(_leaf(table, key_tokens), messages)
        else:
            # The key is also a long/double/boolean column: key text from Python, exactly as
            # the slow path makes it, so a replay batched differently finds the same keys.
            keys = _python_keys(messages, key_tokens)
        return Prepared(keys, out, parsed=True)
    return Prepared(_python_keys(messages, key_tokens), pa.table({RAW: raw_strings(messages)}), parsed=False)


def _python_keys(messages: list[bytes], key_tokens: tuple[str, ...] | None) -> list[str]:
    keys = []
    for i, m in enumerate(messages):
        try:
            doc = json_loads(m)
        except ValueError as exc:
            raise BadMessage(f"message {i + 1} of the batch is not valid JSON ({exc}): {m[:120]!r}") from None
        if not isinstance(doc, dict):
            raise BadMessage(f"message {i + 1} of the batch is not a JSON object: {m[:120]!r}")
        keys.append(key_of(doc, key_tokens, m))
    return keys


def prepare(messages: list[bytes], config: LoaderConfig) -> Prepared:
    if config.rdss:
        from etlstage_workers.spark.rdss_rows import prepare_rdss

        return prepare_rdss(messages, config)
    return prepare_json(messages, config)
