"""The four protocol markers: single bytes, pairwise distinct (docs/protocol.md).

Defaults: EOM ``0x0A`` (``\\n``), EOP ``0x00``, EOB ``0x17``, BNC ``0x11``.

In YAML a marker is an integer (``0x17``, ``23``) or a one-character string whose
escapes YAML already resolved (``"\\n"``, ``"\\x00"``, ``"|"``).  Towards a worker each
marker travels as two lower-case hex digits in ``ETLSTAGE_EOM`` … ``ETLSTAGE_BNC``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from etlstage.errors import MarkerError

MARKER_NAMES = ("eom", "eop", "eob", "bnc")


def parse_marker(value: object, where: str = "marker") -> int:
    """One marker value from YAML or the command line, as an int 0..255.

    >>> parse_marker(0x17), parse_marker("\\n"), parse_marker("|"), parse_marker("0x00")
    (23, 10, 124, 0)
    """
    if isinstance(value, bool):
        raise MarkerError(f"{where}: expected a byte (0..255 or one character), got {value!r}")
    if isinstance(value, int):
        if 0 <= value <= 255:
            return value
        raise MarkerError(f"{where}: {value!r} is outside 0..255")
    if isinstance(value, str):
        if len(value) == 1 and ord(value) <= 255:
            return ord(value)
        low = value.lower()
        if low.startswith("0x") and 3 <= len(low) <= 4:
            try:
                return int(low, 16)
            except ValueError:
                pass
        if low.startswith("\\x") and len(low) == 4:
            try:
                return int(low[2:], 16)
            except ValueError:
                pass
    raise MarkerError(
        f'{where}: expected one byte — an integer such as 0x17 or a one-character string such as "\\n" — got {value!r}'
    )


@dataclass(frozen=True)
class Markers:
    """A stage's four markers as ints, with ready-made one-byte ``bytes`` views."""

    eom: int = 0x0A
    eop: int = 0x00
    eob: int = 0x17
    bnc: int = 0x11

    def __post_init__(self) -> None:
        values = {name: getattr(self, name) for name in MARKER_NAMES}
        for name, value in values.items():
            if not isinstance(value, int) or not 0 <= value <= 255:
                raise MarkerError(f"marker {name}: expected a byte 0..255, got {value!r}")
        seen: dict[int, str] = {}
        for name, value in values.items():
            if value in seen:
                raise MarkerError(
                    f"markers {seen[value]} and {name} are both 0x{value:02x}; the four markers must be distinct bytes"
                )
            seen[value] = name

    # bytes views, computed once; the hot paths use these
    @property
    def EOM(self) -> bytes:
        return _BYTE[self.eom]

    @property
    def EOP(self) -> bytes:
        return _BYTE[self.eop]

    @property
    def EOB(self) -> bytes:
        return _BYTE[self.eob]

    @property
    def BNC(self) -> bytes:
        return _BYTE[self.bnc]

    def describe(self) -> str:
        return " ".join(f"{n.upper()}=0x{getattr(self, n):02x}" for n in MARKER_NAMES)

    def to_env(self) -> dict[str, str]:
        """``{"ETLSTAGE_EOM": "0a", …}``: the run instruction a worker reads."""
        return {f"ETLSTAGE_{n.upper()}": f"{getattr(self, n):02x}" for n in MARKER_NAMES}

    def named(self) -> dict[bytes, str]:
        """Each marker's byte and its name: ``{b"\\n": "EOM", …}``."""
        return {getattr(self, n.upper()): n.upper() for n in MARKER_NAMES}

    def to_option(self) -> str:
        """The four markers as one text option (a Spark data source's), read back by :meth:`from_option`.

        >>> Markers().to_option(), Markers.from_option("10,0,23,17") == Markers()
        ('10,0,23,17', True)
        """
        return ",".join(str(getattr(self, n)) for n in MARKER_NAMES)

    @classmethod
    def from_option(cls, text: str) -> Markers:
        """Markers from :meth:`to_option`'s text."""
        values = text.split(",")
        if len(values) != len(MARKER_NAMES):
            raise MarkerError(f"markers option {text!r}: expected {len(MARKER_NAMES)} comma-separated bytes")
        try:
            return cls(**{n: int(v) for n, v in zip(MARKER_NAMES, values, strict=True)})
        except ValueError:
            raise MarkerError(f"markers option {text!r}: expected integers 0..255") from None

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Markers:
        """Markers from ``ETLSTAGE_*`` (defaults for the ones not set)."""
        env = os.environ if env is None else env
        values: dict[str, int] = {}
        for name in MARKER_NAMES:
            raw = env.get(f"ETLSTAGE_{name.upper()}")
            if raw is None or raw == "":
                continue
            try:
                values[name] = int(raw, 16)
            except ValueError:
                raise MarkerError(f"ETLSTAGE_{name.upper()}={raw!r}: expected two hex digits such as 0a") from None
        return cls(**values)

    @classmethod
    def from_mapping(cls, data: Mapping[str, object], base: Markers | None = None, where: str = "markers") -> Markers:
        """``base`` (defaults) overridden by the keys present in ``data``."""
        base = base or cls()
        values = {n: getattr(base, n) for n in MARKER_NAMES}
        for name, raw in data.items():
            if name not in MARKER_NAMES:
                raise MarkerError(f"{where}: unknown marker {name!r}; expected one of {', '.join(MARKER_NAMES)}")
            values[name] = parse_marker(raw, f"{where}.{name}")
        return cls(**values)


_BYTE = [bytes([i]) for i in range(256)]
DEFAULT_MARKERS = Markers()
