"""Framing: bytes on the wire <-> messages and markers.  Pure byte logic.

Both directions work on *blocks*: a block is the concatenation of complete messages,
each followed by EOM.  With the default markers::

    >>> encode_block([b"a", b"", b"c"], DEFAULT_MARKERS)
    b'a\\n\\nc\\n'
    >>> split_block(b'a\\n\\nc\\n', DEFAULT_MARKERS)
    [b'a', b'', b'c']

The supervisor never looks inside messages: it moves blocks, finds markers with
``bytes.find``, counts messages with ``bytes.count`` and checks that a block holds no
foreign marker with ``bytes.count`` too — no per-message and no per-byte Python loop.

:class:`ReplyParser` reads what a worker writes (``r1\\nr2\\n\\x00``, ``\\x11``);
:class:`RequestParser` reads what the supervisor writes (``m1\\nm2\\n\\x17``).
"""

from __future__ import annotations

import operator
import re
from collections.abc import Sequence
from itertools import repeat

from etlstage.errors import MarkerInMessage, ProtocolViolation
from etlstage.protocol.markers import DEFAULT_MARKERS, Markers

MAX_MESSAGE_BYTES = 64 << 20  # a stage's max_message_bytes when stages.yaml says none


class Signal:
    """A marker seen on the wire, as a token between blocks (``EOP``, ``BNC``, ``EOB``)."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name


class Bncs(Signal):
    """BNCs in a row, as one token: a worker-driven batch's messages are written ahead of
    its BNCs, so the worker's BNCs come in runs, and a reader does one step per run, not
    one per message.  ``count``: how many; :data:`BNC` is the run of one.

    >>> Bncs(3), Bncs(1) == BNC
    (BNC×3, True)
    """

    __slots__ = ("count",)

    def __init__(self, count: int) -> None:
        super().__init__("BNC")
        self.count = count

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Bncs) and other.count == self.count

    def __hash__(self) -> int:
        return hash((Bncs, self.count))

    def __repr__(self) -> str:
        return "BNC" if self.count == 1 else f"BNC×{self.count}"


EOP = Signal("EOP")
BNC = Bncs(1)
EOB = Signal("EOB")

Token = bytes | Signal


def encode_block(messages: Sequence[bytes], markers: Markers = DEFAULT_MARKERS) -> bytes:
    """Messages as one block: each followed by EOM.  Does not check for markers."""
    if not messages:
        return b""
    # the last EOM as one more separator: ``join(...) + eom`` would copy the block again
    return markers.EOM.join([*messages, b""])


def split_block(block: bytes, markers: Markers | bytes = DEFAULT_MARKERS, keep_eom: bool = False) -> list[bytes]:
    """The messages of a block (every message ends with EOM, so the last piece is empty);
    ``markers``: the stage's markers, or its EOM byte alone; ``keep_eom``: each message
    still framed, ready to be written on its own.

    >>> split_block(b'a\\nb\\n', keep_eom=True)
    [b'a\\n', b'b\\n']
    """
    if not block:
        return []
    eom = markers if isinstance(markers, bytes) else markers.EOM
    parts = block.split(eom)
    parts.pop()
    if keep_eom:
        return [m + eom for m in parts]
    return parts


def count_eom(block: bytes, eom: bytes) -> int:
    """Messages in a block.  ``bytes.count`` walks every byte; when messages are big
    (few EOMs in the first 4 KiB) hopping from EOM to EOM with ``find`` (memchr) is
    several times faster.

    >>> count_eom(b"a\\n" * 3, b"\\n"), count_eom((b"x" * 9999 + b"\\n") * 3, b"\\n")
    (3, 3)
    """
    if len(block) < 8192 or block.count(eom, 0, 4096) >= 4:
        return block.count(eom)
    n = 0
    pos = block.find(eom)
    while pos >= 0:
        n += 1
        pos = block.find(eom, pos + 1)
    return n


def cut_position(block: bytes, n: int, eom: bytes, start: int = 0, total: int | None = None) -> int:
    """Where the first ``n`` messages of ``block[start:]`` end.

    With ``total`` (the message count of ``block[start:]``) the cut is guessed from the
    mean message size, checked with one ``bytes.count`` over the shorter side of the
    guess and corrected with a few ``find`` calls: no per-message work when sizes are
    alike, and at most half the block counted again.

    >>> cut_position(b"a\\nbbbbbb\\nc\\nd\\n", 2, b"\\n", total=4)
    9
    >>> cut_position(b"a\\nbbbbbb\\nc\\nd\\n", 1, b"\\n", start=2, total=3)
    9
    >>> cut_position(b"a\\n" * 100, 90, b"\\n", total=100)  # counted from the end
    180
    """
    if total is None or total < 64:
        pos = start
        for _ in range(n):
            pos = block.index(eom, pos) + 1
        return pos
    guess = start + (len(block) - start) * n // total
    shorter_before = guess - start <= len(block) - guess
    have = block.count(eom, start, guess) if shorter_before else total - block.count(eom, guess)
    pos = guess
    if have < n:  # move forward to the n-th EOM
        for _ in range(n - have):
            pos = block.index(eom, pos) + 1
    else:  # move back: drop EOMs until exactly n lie before pos
        pos = block.rindex(eom, start, guess) + 1 if have else start
        for _ in range(have - n):
            pos = block.rindex(eom, start, pos - 1) + 1
    return pos


def check_block_for(block: bytes, markers: Markers, who: str) -> None:
    """Raise :class:`MarkerInMessage` if a message in ``block`` holds a non-EOM marker.

    ``block`` is already framed with ``markers.EOM``; ``who`` names the receiver for the
    error ("stage 'load'").
    """
    for name, byte in (("EOP", markers.EOP), ("EOB", markers.EOB), ("BNC", markers.BNC)):
        at = block.find(byte)
        if at >= 0:
            raise MarkerInMessage(
                f"a message for {who} contains its {name} marker 0x{byte[0]:02x} at byte {at} of the block; "
                "messages must not contain marker bytes (choose other markers, or encode the data)",
                _around(block, at),
            )


def reframe(block: bytes, source: Markers, target: Markers, who: str) -> bytes:
    """A block framed with ``source`` markers, re-framed and checked for ``target``.

    Same EOM: only the check.  Different EOM: the target's EOM must not occur inside
    any message, then every source EOM becomes the target's.
    """
    if source.eom != target.eom:
        at = block.find(target.EOM)
        if at >= 0:
            raise MarkerInMessage(
                f"a message for {who} contains its EOM marker 0x{target.eom:02x} at byte {at} of the block; "
                "messages must not contain marker bytes",
                _around(block, at),
            )
        block = block.replace(source.EOM, target.EOM)
    check_block_for(block, target, who)
    return block


def check_messages(messages: Sequence[bytes], markers: Markers, who: str = "the supervisor") -> bytes:
    """Encode ``messages`` into a block, refusing any that contains a marker.

    Used by workers (the SDK) before they write results: a worker never desynchronises
    the stream, it fails with a clear error instead.
    """
    block = encode_block(messages, markers)
    if _holds_eom(messages, block, markers.eom, markers.EOM):
        for i, m in enumerate(messages):
            if markers.eom in m:
                raise MarkerInMessage(
                    f"message #{i} for {who} contains the EOM marker 0x{markers.eom:02x}",
                    m[:80],
                )
    check_block_for(block, markers, who)
    return block


def _holds_eom(messages: Sequence[bytes], block: bytes, eom: int, eom_bytes: bytes) -> bool:
    """Whether a message of ``block`` (``messages`` framed) holds an EOM of its own.
    ``bytes.count`` walks the block byte by byte; when messages average over ~128 bytes,
    one memchr per message is faster. The byte is looked for as an ``int``: ``b"\\n" in m``
    first tries the needle as an int, and the TypeError it raises and clears costs more
    than scanning 1 KB (0.27 against 0.05 µs per 1 KB message; `bench/framing_check.py`)."""
    if len(block) > 128 * len(messages):
        return any(map(operator.contains, messages, repeat(eom)))
    return block.count(eom_bytes) != len(messages)


class Checked(list[bytes]):
    """Messages together with their block, encoded and checked by :func:`checked`: the
    SDK writes that block as it is rather than encoding and checking it a second time.
    The list must not change afterwards (the SDK falls back to checking when its length
    or the markers differ)."""

    def __init__(self, messages: Sequence[bytes], block: bytes, markers: Markers) -> None:
        super().__init__(messages)
        self.block = block
        self.markers = markers


def checked(messages: Sequence[bytes], markers: Markers, who: str = "the supervisor") -> Checked:
    """:func:`check_messages`, keeping the block for the SDK to write (a worker that must
    look for marker bytes itself, to make a message safe, scans each result once)."""
    return Checked(messages, check_messages(messages, markers, who), markers)


def _around(data: bytes, at: int, width: int = 24) -> bytes:
    return data[max(0, at - width) : at + width]


class ReplyParser:
    """Tokenises a worker's stdout into blocks of complete results and signals.

    ``feed(chunk)`` returns a list of tokens: ``bytes`` (one or more complete messages,
    each ending with EOM), :data:`EOP` and :class:`Bncs` (BNCs in a row, one token).  It raises
    :class:`ProtocolViolation` for bytes no worker may write: EOB, BNC where the scenario
    has none, EOP where the scenario has none (plain E), a result cut short by EOP or BNC
    (no EOM), a message longer than ``max_message_bytes``.  Which signal may come *when*
    is the stage driver's business; this class only knows the bytes.

    >>> p = ReplyParser(DEFAULT_MARKERS, bnc_allowed=True)
    >>> p.feed(b"\\x11r1\\nr")
    [BNC, b'r1\\n']
    >>> p.feed(b"2\\n\\x00\\x11\\x11\\x11")
    [b'r2\\n', EOP, BNC×3]
    """

    __slots__ = (
        "_bnc",
        "_bnc_ok",
        "_bnc_run",
        "_eob",
        "_eom",
        "_eop",
        "_eop_ok",
        "_m",
        "_max",
        "_tail",
        "_tail_len",
    )

    def __init__(
        self,
        markers: Markers,
        *,
        bnc_allowed: bool = False,
        eop_allowed: bool = True,
        max_message_bytes: int = MAX_MESSAGE_BYTES,
    ) -> None:
        self._m = markers
        self._eom, self._eop, self._bnc, self._eob = markers.EOM, markers.EOP, markers.BNC, markers.EOB
        self._bnc_ok = bnc_allowed
        self._bnc_run = re.compile(re.escape(self._bnc) + b"+")
        self._eop_ok = eop_allowed
        self._max = max_message_bytes
        self._tail: list[bytes] = []  # bytes of the message being received, not yet ended by EOM
        self._tail_len = 0

    @property
    def pending_bytes(self) -> int:
        """Bytes of an unfinished message held back (a worker that never writes EOM)."""
        return self._tail_len

    def feed(self, chunk: bytes) -> list[Token]:
        out: list[Token] = []
        if not chunk:
            return out
        if self._eob in chunk:
            at = chunk.find(self._eob)
            raise ProtocolViolation(
                f"the worker wrote EOB (0x{self._m.eob:02x}) at byte {at} of its output; "
                "EOB is sent by the supervisor only (a result must not contain marker bytes)",
                _around(chunk, at),
            )
        pos = 0
        end = len(chunk)
        # next EOP / BNC positions, each searched again only once passed (-1: none left)
        i = chunk.find(self._eop)
        j = chunk.find(self._bnc) if self._bnc_ok or self._bnc in chunk else -1
        while pos < end:
            if 0 <= i < pos:
                i = chunk.find(self._eop, pos)
            if 0 <= j < pos:
                j = chunk.find(self._bnc, pos)
            if i < 0 and j < 0:
                self._data(chunk, pos, end, out)
                break
            k, signal = (i, EOP) if j < 0 or (0 <= i < j) else (j, BNC)
            if signal is EOP and not self._eop_ok:
                raise ProtocolViolation(
                    f"the worker wrote EOP (0x{self._m.eop:02x}) but a plain E-stage has no requests to end; "
                    "it should only write messages and exit",
                    _around(chunk, k),
                )
            if signal is BNC and not self._bnc_ok:
                raise ProtocolViolation(
                    f"the worker wrote BNC (0x{self._m.bnc:02x}) but this stage is not in worker-driven batch mode",
                    _around(chunk, k),
                )
            self._data(chunk, pos, k, out)
            if self._tail_len:
                partial = b"".join(self._tail)
                raise ProtocolViolation(
                    f"the worker wrote {signal.name} in the middle of a result: {len(partial)} bytes "
                    "were not ended by EOM (every result must end with EOM before EOP)",
                    partial[-40:] + chunk[k : k + 1],
                )
            if signal is EOP:
                out.append(EOP)
                pos = k + 1
                continue
            run = self._bnc_run.match(chunk, k)
            assert run is not None  # chunk[k] is BNC
            pos = run.end()
            out.append(BNC if pos == k + 1 else Bncs(pos - k))
        return out

    def _data(self, chunk: bytes, start: int, stop: int, out: list[Token]) -> None:
        """Append complete messages of chunk[start:stop] to ``out``; keep the rest as tail."""
        if start >= stop:
            return
        last = chunk.rfind(self._eom, start, stop)
        if last < 0:
            self._grow_tail(chunk[start:stop])
            return
        first = chunk.find(self._eom, start, stop)
        if self._tail_len + (first - start) > self._max:
            self._too_long(self._tail_len + first - start, chunk[start : start + 40])
        if stop - start > self._max:
            self._check_lengths(chunk, start, last)
        if self._tail:
            self._tail.append(chunk[start : last + 1])
            out.append(b"".join(self._tail))
            self._tail.clear()
            self._tail_len = 0
        else:
            out.append(chunk[start : last + 1] if (start, last + 1) != (0, len(chunk)) else chunk)
        if last + 1 < stop:
            self._grow_tail(chunk[last + 1 : stop])

    def _grow_tail(self, piece: bytes) -> None:
        self._tail.append(piece)
        self._tail_len += len(piece)
        if self._tail_len > self._max:
            self._too_long(self._tail_len, b"".join(self._tail)[:40])

    def _check_lengths(self, chunk: bytes, start: int, last: int) -> None:
        # Only for spans longer than max_message_bytes; normal reads are smaller.
        pos = start
        while pos <= last:
            nxt = chunk.find(self._eom, pos, last + 1)
            if nxt - pos > self._max:
                self._too_long(nxt - pos, chunk[pos : pos + 40])
            pos = nxt + 1

    def _too_long(self, size: int, head: bytes) -> None:
        raise ProtocolViolation(
            f"a message of at least {size} bytes exceeds max_message_bytes={self._max} "
            "(a worker that never writes EOM looks like this too)",
            head,
        )


class RequestParser:
    """Tokenises what the supervisor writes to a worker: messages and EOB.

    ``feed(chunk)`` returns a list of tokens: ``list[bytes]`` (complete messages, EOM
    removed) and :data:`EOB`.  EOP or BNC from the supervisor is a violation.

    >>> p = RequestParser(DEFAULT_MARKERS)
    >>> p.feed(b"m1\\nm2\\nm")
    [[b'm1', b'm2']]
    >>> p.feed(b"3\\n\\x17")
    [[b'm3'], EOB]
    """

    __slots__ = ("_eob", "_eom", "_m", "_tail")

    def __init__(self, markers: Markers) -> None:
        self._m = markers
        self._eom, self._eob = markers.EOM, markers.EOB
        self._tail = b""

    @property
    def pending_bytes(self) -> int:
        return len(self._tail)

    def feed(self, chunk: bytes) -> list[list[bytes] | Signal]:
        for byte, name in ((self._m.EOP, "EOP"), (self._m.BNC, "BNC")):
            if byte in chunk:
                at = chunk.find(byte)
                raise ProtocolViolation(
                    f"the supervisor's input holds {name} (0x{byte[0]:02x}), which only a worker may write",
                    _around(chunk, at),
                )
        out: list[list[bytes] | Signal] = []
        if self._tail:
            chunk = self._tail + chunk
            self._tail = b""
        pos = 0
        while True:
            k = chunk.find(self._eob, pos)
            stop = len(chunk) if k < 0 else k
            part = chunk[pos:stop] if (pos, stop) != (0, len(chunk)) else chunk
            if part:
                messages = part.split(self._eom)
                rest = messages.pop()
                if k >= 0 and rest:
                    raise ProtocolViolation(
                        "EOB arrived in the middle of a message (its bytes were not ended by EOM)",
                        rest[-40:] + self._eob,
                    )
                if messages:
                    out.append(messages)
                if k < 0:
                    self._tail = rest
            if k < 0:
                return out
            out.append(EOB)
            pos = k + 1
