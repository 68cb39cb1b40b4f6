"""Pieces, inboxes and windows: the supervisor's bookkeeping, without processes."""

from __future__ import annotations

import asyncio
import random

import pytest

from etlstage.protocol.framing import cut_position
from etlstage.runtime.flow import Inbox, Piece, Window


@pytest.mark.parametrize("seed", range(5))
def test_cut_position_matches_a_plain_split_for_any_sizes(seed):
    rng = random.Random(seed)
    for _ in range(500):
        k = rng.randint(1, 300)
        msgs = [b"y" * rng.choice([0, 1, 7, 100, 900]) for _ in range(k)]
        block = b"\n".join(msgs) + b"\n"
        n = rng.randint(1, k)
        start = rng.randint(0, k - n)  # cut from any message boundary, as an inbox does
        offset = sum(len(m) + 1 for m in msgs[:start])
        pos = cut_position(block, n, b"\n", offset, k - start)
        assert block[offset:pos] == b"".join(m + b"\n" for m in msgs[start : start + n])
        assert cut_position(block, n, b"\n", offset) == pos  # the count unknown: found message by message


def test_inbox_takes_across_and_within_pieces_and_keeps_counts():
    async def scenario():
        w = Window("src", 0, 3)
        box = Inbox(b"\n", 1 << 20)
        box.put_nowait(Piece(b"a\nb\nc\n", 3, w))
        box.put_nowait(Piece(b"d\ne\n", 2, w))
        first = box.take(4)
        assert [p.block for p in first] == [b"a\nb\nc\n", b"d\n"]
        assert box.messages == 1 and box.bytes == 2
        assert [p.block for p in box.take(10)] == [b"e\n"]
        assert box.take(1) == []

    asyncio.run(scenario())


def test_what_is_put_back_is_taken_again_first_in_its_order_with_counts_restored():
    async def scenario():
        w = Window("src", 0, 3)
        box = Inbox(b"\n", 1 << 20)
        box.put_nowait(Piece(b"a\nb\nc\n", 3, w))
        box.put_nowait(Piece(b"d\ne\n", 2, w))
        taken = box.take(4)  # a whole piece and the head of the next
        box.changed.clear()
        box.put_back(taken)
        assert box.changed.is_set(), "a waiting stage must look again"
        assert (box.messages, box.bytes, len(box)) == (5, 10, 3)
        assert b"".join(p.block for p in box.take(10)) == b"a\nb\nc\nd\ne\n"
        assert (box.messages, box.bytes) == (0, 0)

    asyncio.run(scenario())


def test_inbox_put_waits_for_room():
    async def scenario():
        w = Window("src", 0, 3)
        box = Inbox(b"\n", 10)
        await box.put(Piece(b"123456789\n", 1, w))
        blocked = asyncio.ensure_future(box.put(Piece(b"x\n", 1, w)))
        await asyncio.sleep(0.01)
        assert not blocked.done()
        box.take(1)
        await asyncio.wait_for(blocked, 1)

    asyncio.run(scenario())


def test_inbox_put_fills_to_the_capacity_and_takes_an_oversized_piece_when_empty():
    """Room is bytes, not pieces: small pieces share it up to the capacity; a piece bigger than
    the capacity goes into an empty inbox at once (else it would wait for ever)."""

    async def scenario():
        w = Window("src", 0, 3)
        box = Inbox(b"\n", 10)
        await asyncio.wait_for(box.put(Piece(b"x" * 29 + b"\n", 1, w)), 1)
        assert box.bytes == 30
        box.take(1)
        for _ in range(5):
            await asyncio.wait_for(box.put(Piece(b"a\n", 1, w)), 1)
        assert box.bytes == 10 and box.messages == 5

    asyncio.run(scenario())


def test_window_is_done_only_when_closed_and_nothing_is_left_at_any_level():
    w = Window("src", 0, 3)
    w.add(1, 5)
    w.close()
    assert not w.done and not w.settled_before(2)
    w.add(2, 2)
    w.release(1, 5)
    assert w.settled_before(2) and not w.done
    w.release(2, 2)
    assert w.done


@pytest.mark.parametrize("seed", range(3))
def test_inbox_takes_in_random_sizes_give_back_every_message_in_order(seed):
    rng = random.Random(seed)

    async def scenario():
        w = Window("src", 0, 3)
        box = Inbox(b"\n", 1 << 30)
        sent = []
        for _ in range(50):
            msgs = [b"m%d" % len(sent) + b"z" * rng.choice([0, 3, 200]) for _ in range(rng.randint(1, 300))]
            sent += msgs
            box.put_nowait(Piece(b"\n".join(msgs) + b"\n", len(msgs), w))
        got = []
        while box.messages:
            for p in box.take(rng.randint(1, 500)):
                parts = p.block.split(b"\n")[:-1]
                assert len(parts) == p.count
                got += parts
        assert got == sent and box.bytes == 0

    asyncio.run(scenario())


@pytest.mark.parametrize("seed", range(3))
def test_inbox_take_honours_a_byte_limit_and_loses_nothing(seed):
    """Batches closed by count or by bytes: every message comes out once, in order; a
    take never exceeds its byte limit except with a single message larger than it."""

    async def scenario():
        rng = random.Random(seed)
        w = Window("src", 0, 3)
        for _ in range(1000):
            msgs = [b"x" * rng.randint(0, 20) for _ in range(rng.randint(1, 30))]
            box = Inbox(b"\n", 1 << 30)
            i = 0
            while i < len(msgs):
                part = msgs[i : i + rng.randint(1, 6)]
                i += len(part)
                box.put_nowait(Piece(b"".join(m + b"\n" for m in part), len(part), w))
            got: list[bytes] = []
            while box.messages:
                most, limit = rng.randint(1, 8), rng.choice([None, rng.randint(1, 60)])
                pieces = box.take(most, limit)
                count = sum(p.count for p in pieces)
                size = sum(len(p.block) for p in pieces)
                assert 1 <= count <= most
                assert limit is None or size <= limit or count == 1
                for p in pieces:
                    assert p.block.count(b"\n") == p.count
                    got += p.block.split(b"\n")[:-1]
            assert got == msgs and box.bytes == 0

    asyncio.run(scenario())
