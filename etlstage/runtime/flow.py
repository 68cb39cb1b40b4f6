"""What flows between stages: windows, pieces, inboxes and jobs (docs/protocol.md: windows).

A **piece** is a block of complete messages (each followed by EOM) that all belong to
one window.  A **window** counts, per pipeline level, how many of its messages are still
waiting or being worked on there; it is *done* when it is closed at its source and no
message derived from it is left at any level.  An **inbox** is the bounded buffer in
front of a stage (backpressure).  A **job** is what a stage driver writes to a worker
in one go: one batch, or several single-message requests (:class:`Job`, the one type
both engines use; the supervisor's jobs are made of pieces).
"""

from __future__ import annotations

import asyncio
import collections
import time
from collections.abc import Callable

from etlstage.conversation.job import Job
from etlstage.protocol.framing import cut_position


class Window:
    """One cycle of a cyclic E-stage, or the whole run of a plain one."""

    __slots__ = ("_on_change", "closed", "held", "live", "messages", "opened", "request", "seq", "source")

    def __init__(
        self,
        source: str,
        seq: int,
        levels: int,
        request: object = None,
        on_change: Callable[[Window], None] | None = None,
    ) -> None:
        self.source = source  # "stage#instance" of the extractor
        self.seq = seq
        self.request = request  # {"start": S, "end": E} with supervisor-managed offsets
        self.closed = False
        self.live = [0] * levels
        self.held = 0  # answers not yet known to line up with their requests (see runtime.confirm)
        self.messages = 0  # extracted in this window
        self.opened = time.time()
        self._on_change = on_change

    def __repr__(self) -> str:
        return f"Window({self.source}#{self.seq}, closed={self.closed}, live={self.live}, held={self.held})"

    @property
    def done(self) -> bool:
        return self.closed and not any(self.live) and not self.held

    def settled_before(self, level: int) -> bool:
        """No more of this window's messages can reach ``level``: the barrier has passed."""
        return self.closed and not any(self.live[1:level])

    def add(self, level: int, n: int) -> None:
        self.live[level] += n

    def release(self, level: int, n: int) -> None:
        self.live[level] -= n
        if self._on_change is not None:
            self._on_change(self)

    def hold(self) -> None:
        self.held += 1

    def unhold(self, n: int = 1) -> None:
        self.held -= n
        if not self.held and self._on_change is not None:
            self._on_change(self)

    def close(self) -> None:
        self.closed = True
        if self._on_change is not None:
            self._on_change(self)


class Piece:
    """Messages of one window.  ``offset``: bytes of ``block`` already taken (inboxes only)."""

    __slots__ = ("block", "count", "offset", "window")

    def __init__(self, block: bytes, count: int, window: Window) -> None:
        self.block = block
        self.count = count
        self.window = window
        self.offset = 0


class Inbox:
    """Bounded FIFO of pieces in front of a stage.  ``put`` waits while it is full."""

    def __init__(self, eom: bytes, capacity_bytes: int) -> None:
        self._eom = eom
        self.capacity = capacity_bytes
        self._items: collections.deque[Piece] = collections.deque()
        self.bytes = 0
        self.messages = 0
        self._space = asyncio.Event()
        self._space.set()
        self.changed = asyncio.Event()  # new input, or a window settled upstream
        self.closed = False  # no more input will come

    def __len__(self) -> int:
        return len(self._items)

    def notify(self) -> None:
        self.changed.set()

    def close(self) -> None:
        self.closed = True
        self.changed.set()

    async def wait_changed(self, deadline: float | None) -> None:
        """Wait for new input or a settled window, or until the loop time ``deadline``."""
        self.changed.clear()
        try:
            async with asyncio.timeout_at(deadline):
                await self.changed.wait()
        except TimeoutError:
            pass

    async def put(self, piece: Piece) -> None:
        """Wait for room, then append (a piece bigger than the capacity fits when empty)."""
        while self.bytes and self.bytes + len(piece.block) > self.capacity:
            self._space.clear()
            await self._space.wait()
        self.put_nowait(piece)

    def put_nowait(self, piece: Piece) -> None:
        self._items.append(piece)
        self.bytes += len(piece.block)
        self.messages += piece.count
        self.changed.set()

    def put_back(self, pieces: list[Piece]) -> None:
        """``pieces``, taken from the front and not sent, back at the front in their order
        (a job cut short before it was written: its messages must not leave with it)."""
        for piece in reversed(pieces):
            self._items.appendleft(piece)
            self.bytes += len(piece.block)
            self.messages += piece.count
        if pieces:
            self.changed.set()

    def take(self, max_messages: int, max_bytes: int | None = None, at_least_one: bool = True) -> list[Piece]:
        """Up to ``max_messages`` messages and up to ``max_bytes`` bytes from the front,
        splitting a piece if needed; ``at_least_one``: a first message longer than
        ``max_bytes`` comes alone (otherwise it stays)."""
        out: list[Piece] = []
        want = max_messages
        room = max_bytes if max_bytes is not None else -1
        items = self._items
        eom = self._eom
        while items and want > 0 and room != 0:
            piece = items[0]
            block, offset = piece.block, piece.offset
            size = len(block) - offset
            if piece.count <= want and (room < 0 or size <= room):
                items.popleft()
                if offset:
                    piece = Piece(block[offset:], piece.count, piece.window)
                out.append(piece)
                want -= piece.count
                room = room - size if room > 0 else room
                self.bytes -= size
                self.messages -= piece.count
                continue
            # cut without copying the rest: the piece keeps its block and moves its offset
            n = min(want, piece.count)
            pos = cut_position(block, n, eom, offset, piece.count) if n < piece.count else len(block)
            if 0 <= room < pos - offset:  # the byte limit comes first
                last = block.rfind(eom, offset, offset + room)
                if last < 0 and (out or not at_least_one):
                    break  # the next message does not fit: it starts the next job
                pos = block.index(eom, offset) + 1 if last < 0 else last + 1
                n = block.count(eom, offset, pos)
            head = block[offset:pos]
            out.append(Piece(head, n, piece.window))
            want -= n
            room = max(room - len(head), 0) if room >= 0 else room
            self.bytes -= len(head)
            self.messages -= n
            if n == piece.count:
                items.popleft()
            else:
                piece.offset = pos
                piece.count -= n
                break
        if self.bytes < self.capacity:
            self._space.set()
        if not items:
            self.changed.clear()
        return out


def oldest_window(job: Job[Piece]) -> Window:
    """The window of ``job``'s pieces that opened first: its results go on in that one."""
    return min((p.window for p in job.pieces), key=lambda w: (w.opened, w.seq))
