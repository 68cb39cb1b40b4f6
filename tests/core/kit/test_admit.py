"""``admit``: what a stage may be sent, checked with whole-block scans and split only when
one fails (etlstage/kit/admit.py)."""

from __future__ import annotations

from etlstage.kit.admit import admit
from etlstage.protocol.markers import DEFAULT_MARKERS as M
from tests.support.wire import PRINTABLE


def test_a_block_of_messages_each_within_the_limit_goes_on_as_it_is_though_it_is_longer():
    """Many messages, each under ``max_message_bytes``, the block far over it: nothing is
    refused and the block is passed on as the same object — not split and joined again."""
    block = b"".join(b"m%03d\n" % i for i in range(200))  # 1,000 bytes, messages of 4
    out, count, refused = admit(block, 200, M, M, 10, "stage 'x'")
    assert (count, refused) == (200, [])
    assert out is block


def test_one_message_over_the_limit_is_refused_alone():
    block = b"ok\n" + b"x" * 11 + b"\nfine\n"
    out, count, refused = admit(block, 3, M, M, 10, "stage 'x'")
    assert (out, count) == (b"ok\nfine\n", 2)
    assert [m for m, _ in refused] == [b"x" * 11]
    assert "over its max_message_bytes of 10" in refused[0][1]


def test_other_markers_reframe_the_whole_block_and_refuse_only_a_message_holding_one():
    out, count, refused = admit(b"a\nb|c\n", 2, M, PRINTABLE, 100, "stage 'x'")
    assert (out, count) == (b"a|", 1)
    assert refused[0][0] == b"b|c" and "EOM marker" in refused[0][1]
