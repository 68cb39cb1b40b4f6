"""RDSS batches to rows, in Python: one ``orjson`` parse per message gives the key, the
route, the header columns and the body as JSON text (measured several times faster than
Spark's ``from_json`` copying the body back to text).

String columns hold strings as they are and any other JSON value as its compact JSON
text; ``position`` is a 64-bit integer or null; ``body`` is the JSON text of
``messageBody`` (null when absent or ``null``); ``raw`` the message as received.
"""

from __future__ import annotations

import json

import pyarrow as pa
from etlstage_workers.spark import rdss
from etlstage_workers.spark.config import LoaderConfig
from etlstage_workers.spark.extract import TABLE, Prepared, content_key, key_of, raw_strings

from etlstage.protocol.pointer import parse_pointer

try:
    from orjson import dumps as _orjson_dumps
    from orjson import loads as _orjson_loads
except ImportError:  # pragma: no cover
    _orjson_loads = _orjson_dumps = None  # type: ignore[assignment]

_INT64 = (-(2**63), 2**63 - 1)
_HEADER_TEXT = ("messageId", "messageClass", "messageType", "version", "generator", "errorCode", "errorDescription")


def _loads(message: bytes) -> object:
    if _orjson_loads is not None:
        try:
            return _orjson_loads(message)
        except ValueError:
            pass  # orjson refuses some valid JSON (integers beyond 64 bits): ask the standard parser
    return json.loads(message)


def _json_text(value: object) -> str:
    if _orjson_dumps is not None:
        try:
            return _orjson_dumps(value).decode()
        except TypeError:
            pass
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def _text(value: object) -> str | None:
    if value is None or isinstance(value, str):
        return value
    return _json_text(value)


def _long(value: object) -> int | None:
    if isinstance(value, int) and not isinstance(value, bool) and _INT64[0] <= value <= _INT64[1]:
        return value
    return None


def _member(node: object, name: str) -> object:
    return node.get(name) if isinstance(node, dict) else None


def prepare_rdss(messages: list[bytes], config: LoaderConfig) -> Prepared:
    """Key (messageId, or ``--key``), route by errorCode, columns; bad payloads go to ``error``."""
    key_tokens = parse_pointer(config.key_pointer or rdss.KEY_POINTER)
    columns: dict[str, list] = {c.name: [] for c in config.output_columns}
    keys: list[str] = []
    routes: list[str] = []
    header_cols = [(name, columns[name]) for name in _HEADER_TEXT]
    sequence, position, published, body = (
        columns["sequence"],
        columns["position"],
        columns["publishedTimestamp"],
        columns["body"],
    )
    for m in messages:
        try:
            doc = _loads(m)
            problem = None if isinstance(doc, dict) else f"payload is not a JSON object: {m[:60]!r}"
        except (ValueError, RecursionError) as exc:
            doc, problem = None, f"payload is not valid JSON ({exc})"
        if problem is not None:
            keys.append(content_key(m))
            routes.append(rdss.ERROR)
            for name, col in header_cols:
                col.append(rdss.NOT_JSON if name == "errorCode" else problem if name == "errorDescription" else None)
            sequence.append(None)
            position.append(None)
            published.append(None)
            body.append(None)
            continue
        header = doc.get("messageHeader")  # type: ignore[union-attr]
        keys.append(key_of(doc, key_tokens, m))
        routes.append(rdss.route_of(_member(header, "errorCode")))
        for name, col in header_cols:
            col.append(_text(_member(header, name)))
        seq = _member(header, "messageSequence")
        sequence.append(_text(_member(seq, "sequence")))
        position.append(_long(_member(seq, "position")))
        published.append(_text(_member(_member(header, "messageTimings"), "publishedTimestamp")))
        value = doc.get("messageBody")  # type: ignore[union-attr]
        body.append(None if value is None else _json_text(value))
    arrays = {
        name: pa.array(values, pa.int64() if name == "position" else pa.string()) for name, values in columns.items()
    }
    arrays["raw"] = raw_strings(messages)
    arrays[TABLE] = pa.array(routes, pa.string())
    return Prepared(keys, pa.table(arrays), parsed=True, routes=routes)
