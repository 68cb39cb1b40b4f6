"""The Spark engine's message counts and window cuts (numpy, slice by slice) against the
plain byte-by-byte answer, where slices meet included."""

from __future__ import annotations

import itertools
import random
from pathlib import Path

import pytest

from etlstage.spark.driver_line import DriverLine, read_piece
from etlstage.spark.tasks.blocks import SLICE, SMALL, count_messages, part_cuts
from etlstage.spark.tasks.spool import spool_blocks, write_window

EOM = 0x0A


def messages(rng: random.Random, n: int, longest: int) -> bytes:
    return b"".join(b"m" * rng.randrange(longest) + b"\n" for _ in range(n))


def reference_cuts(block: bytes, parts: int) -> list[int]:
    ends = [i + 1 for i, b in enumerate(block) if b == EOM]
    total = len(ends)
    return [0] + [ends[total * k // parts - 1] if total * k // parts else 0 for k in range(1, parts)] + [len(block)]


def flat(pieces: list[bytes], cuts: list[tuple[int, int]]) -> list[int]:
    """(piece, offset) places as offsets into the pieces joined."""
    return [sum(map(len, pieces[:j])) + offset for j, offset in cuts]


def in_pieces(block: bytes, rng: random.Random) -> list[bytes]:
    """``block`` cut at random places, some inside messages, some empty pieces among them."""
    places = sorted(rng.sample(range(len(block) + 1), min(6, len(block) + 1)))
    bounds = [0, *places, places[-1], len(block)]
    return [block[a:b] for a, b in itertools.pairwise(bounds)]


@pytest.mark.parametrize("size", [0, 1, SMALL - 1, SMALL, SMALL + 1, SLICE - 1, SLICE, SLICE + 1, 3 * SLICE + 17])
def test_count_messages_counts_every_eom_at_the_sizes_where_the_method_changes(size: int) -> None:
    rng = random.Random(size)
    block = bytes(rng.choice(b"ab\n") for _ in range(size))
    assert count_messages(block, EOM) == block.count(b"\n")
    sparse = (b"x" * 5000 + b"\n") * (size // 5001)
    assert count_messages(sparse, EOM) == sparse.count(b"\n")


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("parts", [1, 2, 3, 5])
def test_part_cuts_are_the_plain_count_cuts_across_slices_and_pieces(seed: int, parts: int) -> None:
    rng = random.Random(seed)
    block = messages(rng, rng.randrange(1, 4000), longest=rng.choice([3, 300, 3000]))
    assert flat([block], part_cuts([block], EOM, parts)) == reference_cuts(block, parts)
    pieces = in_pieces(block, rng)
    assert flat(pieces, part_cuts(pieces, EOM, parts)) == reference_cuts(block, parts)


def test_a_cut_on_the_last_byte_of_a_slice_and_fewer_messages_than_parts() -> None:
    block = b"x" * (SLICE - 1) + b"\n" + b"y" * 10 + b"\n"  # the first EOM ends slice 0 exactly
    assert part_cuts([block], EOM, 2) == [(0, 0), (0, SLICE), (0, len(block))]
    assert flat([block], part_cuts([block], EOM, 2)) == reference_cuts(block, 2)
    assert part_cuts([b"a\n"], EOM, 3) == [(0, 0), (0, 0), (0, 0), (0, 2)]
    assert part_cuts([], EOM, 2) == [(0, 0), (0, 0), (0, 0)]


@pytest.mark.parametrize("seed", [7, 8])
def test_a_window_over_many_slices_and_pieces_is_written_whole_in_parts_of_equal_counts(
    tmp_path: Path, seed: int
) -> None:
    rng = random.Random(seed)
    block = messages(rng, 20_000, longest=200)
    assert len(block) > 4 * SLICE
    write_window(tmp_path, "0", in_pieces(block, rng), EOM, 3)
    files = [(tmp_path / f"0-{p}.bin").read_bytes() for p in range(3)]
    assert b"".join(files) == block
    assert all(f.endswith(b"\n") for f in files)
    counts = [f.count(b"\n") for f in files]
    assert max(counts) - min(counts) <= 1, counts


def test_spool_blocks_pass_whole_pieces_on_and_carry_a_message_longer_than_a_piece(tmp_path: Path) -> None:
    first, long, rest = b"a" * 999 + b"\n", b"b" * 2499 + b"\n", b"c\n" * 250  # pieces of 1,000 bytes
    block = first + long + rest
    (tmp_path / "0-0.bin").write_bytes(block)
    with DriverLine({"spool": lambda header, _: read_piece(tmp_path, header)}) as line:
        pieces = list(spool_blocks(line.address.read("s", "0-0.bin", piece=1000), EOM, "0-0.bin"))
    assert pieces == [first, long + rest]  # a piece ending with a message as it came; two carried
