"""A source record's bytes as exactly one protocol message, whatever marker bytes they hold.

The rule the stock extractors (Kinesis, Kafka) share: a record holding one of the stage's
marker bytes must neither desynchronise the stream nor vanish.  JSON is re-serialised
compactly with ``ensure_ascii`` (no raw control byte is left: a trailing newline simply
goes); anything else follows ``on_marker``: ``envelope`` (the source's JSON envelope with
the bytes in base64), ``error`` (that envelope with an error code the next stage can
route), or ``fail`` (stop: nothing is committed, so nothing is lost).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Any

from etlstage.errors import MarkerInMessage
from etlstage.protocol.markers import Markers

ON_MARKER = ("envelope", "error", "fail")
DATA_ENCODINGS = ("auto", "utf8", "base64")


class MarkerGuard:
    """``error_code`` names the source in error objects (``KINESIS_MARKER_IN_DATA``)."""

    def __init__(self, markers: Markers, on_marker: str, error_code: str, log: logging.Logger) -> None:
        if on_marker not in ON_MARKER:
            raise ValueError(f"on_marker {on_marker!r}: expected one of {', '.join(ON_MARKER)}")
        self.on_marker = on_marker
        self.error_code = error_code
        self.log = log
        self._eom = markers.EOM
        self._others = (markers.EOP, markers.EOB, markers.BNC)
        self.escaped = 0  # records re-serialised or enveloped because of a marker byte
        self._notes = 0

    def clean(self, block: bytes, n: int) -> bool:
        """``block`` is ``n`` messages, each ended by EOM, with no other marker byte."""
        return block.count(self._eom) == n and not any(m in block for m in self._others)

    def any_marker(self, block: bytes) -> bool:
        return self._eom in block or any(m in block for m in self._others)

    def safe(self, data: bytes, where: str, envelope: Callable[[], dict[str, Any]], who: str = "") -> bytes:
        """``data`` if it is one clean message; otherwise what ``on_marker`` says.
        ``envelope()`` gives the record's envelope with its bytes in base64; ``who`` adds to
        the error a user needs to find the record (a partition key, say)."""
        if self.clean(data + self._eom, 1):
            return data
        self.escaped += 1
        try:
            doc = json.loads(data)
        except ValueError:
            pass
        else:
            compact = json.dumps(doc, separators=(",", ":"), ensure_ascii=True).encode("ascii")
            if self.clean(compact + self._eom, 1):
                self._note(logging.INFO, f"{where} holds a marker byte; its JSON was re-serialised compactly")
                return compact
        if self.on_marker == "fail":
            raise MarkerInMessage(
                f"{where}{who} holds a marker byte of this stage and is not JSON; "
                "stopping with nothing committed (use --on-marker envelope or error, or --envelope)",
                data[:80],
            )
        doc = envelope()
        if self.on_marker == "error":
            doc = {"error": self.error_code, "description": f"{where} holds a marker byte", **doc}
            self._note(logging.WARNING, f"{where} holds a marker byte and is not JSON: sent on as an error object")
        else:
            self._note(logging.WARNING, f"{where} holds a marker byte and is not JSON: sent on as a base64 envelope")
        return self.dump(doc, where)

    def dump(self, doc: dict[str, Any], where: str) -> bytes:
        """An envelope as one compact JSON message; refused when even that holds a marker."""
        raw = json.dumps(doc, separators=(",", ":"), ensure_ascii=True).encode("ascii")
        if not self.clean(raw + self._eom, 1):
            raise MarkerInMessage(
                f"{where}: even its JSON envelope holds a marker byte of this stage "
                "(a printable marker such as '|' or '{' clashes with JSON); choose control bytes as markers",
                raw[:80],
            )
        return raw

    def _note(self, level: int, text: str) -> None:
        """Log the first few, then every 1000th: JSON lines ending in a newline are common."""
        self._notes += 1
        n = self._notes
        if n <= 10 or n % 1000 == 0:
            more = "" if n < 10 else f" ({n} records so far; only every 1000th is logged from now on)"
            self.log.log(level, "%s%s", text, more)
