"""The byte layer: markers, the reply and request parsers, re-framing."""

from __future__ import annotations

import re

import pytest

from etlstage.errors import ConfigError, MarkerError, MarkerInMessage, ProtocolViolation
from etlstage.protocol import (
    DEFAULT_MARKERS,
    EOB,
    EOP,
    Bncs,
    Markers,
    ReplyParser,
    RequestParser,
    Scenario,
    check_block_for,
    check_messages,
    parse_marker,
    reframe,
)

PRINTABLE = Markers(eom=ord("|"), eop=ord("#"), eob=ord("~"), bnc=ord("^"))


@pytest.mark.parametrize(
    "value, expected",
    [(0x17, 0x17), (0, 0), ("\n", 10), ("|", 124), ("0x11", 0x11), ("0xa", 10), ("\\x00", 0), ("\x00", 0)],
)
def test_parse_marker_accepts_ints_and_one_character_strings(value, expected):
    assert parse_marker(value) == expected


# "ab12" (four characters) and a backslash-x with one or three digits: half an escape, not one;
# "0x100" and "0x0ff": more than two hex digits, never one byte's spelling
@pytest.mark.parametrize("value", [256, -1, "ab", "", True, 1.5, "0xZZ", "ab12", "\\x1", "\\x123", "0x100", "0x0ff"])
def test_parse_marker_rejects_anything_else_naming_the_value(value):
    with pytest.raises(MarkerError) as err:
        parse_marker(value, "markers.eom")
    assert "markers.eom" in str(err.value) and repr(value) in str(err.value)


@pytest.mark.parametrize("value", [256, -1, 0x1FF])
def test_an_integer_marker_out_of_range_says_so(value):
    with pytest.raises(MarkerError, match=rf"markers.eob: {value} is outside 0\.\.255"):
        parse_marker(value, "markers.eob")


def test_markers_from_a_mapping_override_the_base_and_refuse_an_unknown_name():
    base = Markers(eom=ord("|"))
    got = Markers.from_mapping({"eob": "~", "bnc": "0x12"}, base, "stages[0].markers")
    assert (got.eom, got.eop, got.eob, got.bnc) == (ord("|"), 0, ord("~"), 0x12)
    with pytest.raises(MarkerError, match=r"stages\[0\]\.markers: unknown marker 'eon'; expected one of eom, eop"):
        Markers.from_mapping({"eon": 1}, base, "stages[0].markers")


def test_markers_must_be_distinct():
    with pytest.raises(MarkerError, match="eom and eop are both 0x0a"):
        Markers(eom=10, eop=10)


def test_markers_travel_as_two_hex_digits():
    env = PRINTABLE.to_env()
    assert env == {"ETLSTAGE_EOM": "7c", "ETLSTAGE_EOP": "23", "ETLSTAGE_EOB": "7e", "ETLSTAGE_BNC": "5e"}
    assert Markers.from_env(env) == PRINTABLE
    with pytest.raises(MarkerError, match="ETLSTAGE_EOM='zz'"):
        Markers.from_env({"ETLSTAGE_EOM": "zz"})


@pytest.mark.parametrize("size", [0, -2, "3", 2.5])
def test_a_scenario_refuses_a_batch_size_that_is_not_a_positive_integer(size):
    """What an SDK reads from ETLSTAGE_BATCH_SIZE (or a harness is given) is checked as stages.yaml is."""
    with pytest.raises(ConfigError, match=rf"stage 't'.*batch_size {re.escape(repr(size))}: expected an integer >= 1"):
        Scenario(type="T", mode="batch", batch_size=size, stage="t")  # type: ignore[arg-type]


def test_scenario_env_and_placeholders():
    sc = Scenario(type="T", mode="batch", batch_size=3, batch_driver="worker", stage="t", state_dir="/s")
    env = sc.to_env()
    assert env["ETLSTAGE_MODE"] == "batch" and env["ETLSTAGE_BATCH_DRIVER"] == "worker"
    assert env["ETLSTAGE_BATCH_SIZE"] == "3" and env["ETLSTAGE_EOB"] == "17"
    assert Scenario.from_env(env) == sc
    assert sc.expand(["w", "--eom={eom}", "--n", "{batch_size}", "{{eom}}", "{'k': 1}"]) == [
        "w",
        "--eom=0a",
        "--n",
        "3",
        "{eom}",
        "{'k': 1}",
    ]


def feed_in_pieces(parser, data: bytes, cut: int):
    tokens = []
    for i in range(0, len(data), cut):
        tokens.extend(parser.feed(data[i : i + cut]))
    return tokens


def normalise(tokens):
    """Join adjacent data tokens, and adjacent runs of BNCs, so the result does not depend on chunking."""
    out = []
    for t in tokens:
        if isinstance(t, bytes) and out and isinstance(out[-1], bytes):
            out[-1] += t
        elif isinstance(t, Bncs) and out and isinstance(out[-1], Bncs):
            out[-1] = Bncs(out[-1].count + t.count)
        else:
            out.append(t)
    return out


@pytest.mark.parametrize("markers", [DEFAULT_MARKERS, PRINTABLE], ids=["default", "printable"])
def test_reply_parser_is_independent_of_chunking(markers):
    m = markers
    stream = m.BNC + m.BNC + b"r1" + m.EOM + m.EOM + b"r3" + m.EOM + m.EOP + m.EOP + b"x" + m.EOM + m.EOP
    expected = [Bncs(2), b"r1" + m.EOM + m.EOM + b"r3" + m.EOM, EOP, EOP, b"x" + m.EOM, EOP]
    for cut in range(1, len(stream) + 1):
        parser = ReplyParser(m, bnc_allowed=True)
        assert normalise(feed_in_pieces(parser, stream, cut)) == expected, cut


def test_reply_parser_refuses_eob_from_a_worker():
    with pytest.raises(ProtocolViolation, match="EOB"):
        ReplyParser(DEFAULT_MARKERS).feed(b"a\n\x17")


def test_reply_parser_refuses_bnc_outside_worker_driven_batches():
    with pytest.raises(ProtocolViolation, match="not in worker-driven batch mode"):
        ReplyParser(DEFAULT_MARKERS).feed(b"\x11")


def test_reply_parser_refuses_eop_from_a_plain_extractor():
    with pytest.raises(ProtocolViolation, match="plain E-stage"):
        ReplyParser(DEFAULT_MARKERS, eop_allowed=False).feed(b"a\n\x00")


def test_result_cut_short_by_eop_is_a_violation():
    p = ReplyParser(DEFAULT_MARKERS)
    p.feed(b"abc")
    with pytest.raises(ProtocolViolation, match="not ended by EOM") as err:
        p.feed(b"def\x00")
    assert b"abcdef" in err.value.snippet


@pytest.mark.parametrize("cut", [1, 7, 1000])
def test_message_longer_than_the_limit_is_a_violation(cut):
    p = ReplyParser(DEFAULT_MARKERS, max_message_bytes=50)
    ok = b"x" * 50 + b"\n"
    assert normalise(feed_in_pieces(p, ok, cut)) == [ok]
    with pytest.raises(ProtocolViolation, match="exceeds max_message_bytes=50") as err:
        feed_in_pieces(p, b"0123456789" * 6 + b"\n", cut)
    assert err.value.snippet == b"0123456789" * 4  # the message's first 40 bytes, no more
    later = ReplyParser(DEFAULT_MARKERS, max_message_bytes=50)  # the oversize one after another in one read
    with pytest.raises(ProtocolViolation, match="exceeds max_message_bytes=50") as err:
        later.feed(b"ok\n" + b"0123456789" * 6 + b"\n")
    assert err.value.snippet == b"0123456789" * 4


def test_request_parser_splits_messages_and_batches():
    p = RequestParser(PRINTABLE)
    assert p.feed(b"a|b|c") == [[b"a", b"b"]]
    assert p.feed(b"|~|~") == [[b"c"], EOB, [b""], EOB]
    with pytest.raises(ProtocolViolation, match="EOP"):
        p.feed(b"#")


def test_check_messages_refuses_markers_inside_results():
    with pytest.raises(MarkerInMessage, match="EOM"):
        check_messages([b"a\nb"], DEFAULT_MARKERS)
    with pytest.raises(MarkerInMessage, match="BNC marker 0x11"):
        check_messages([b"ok", b"a\x11b"], DEFAULT_MARKERS)
    assert check_messages([b"a", b""], DEFAULT_MARKERS) == b"a\n\n"


@pytest.mark.parametrize("size", [10, 127, 129, 511, 513, 5000])
@pytest.mark.parametrize("markers", [DEFAULT_MARKERS, PRINTABLE], ids=["default", "printable"])
def test_check_messages_finds_an_eom_inside_small_and_big_messages(size: int, markers: Markers) -> None:
    """Small messages are checked by counting the block's EOMs, big ones message by
    message: an EOM inside any one message, first, middle or last, is refused by both."""
    eom = markers.EOM
    for at in (0, 1, 2):
        messages = [b"x" * size for _ in range(3)]
        messages[at] = b"x" * (size // 2) + eom + b"x" * (size - size // 2 - 1)
        with pytest.raises(MarkerInMessage, match=f"message #{at} .*EOM marker 0x{markers.eom:02x}"):
            check_messages(messages, markers)
    clean = [b"y" * size for _ in range(3)]
    assert check_messages(clean, markers) == b"".join(m + eom for m in clean)


def test_reframe_between_stages_with_different_markers():
    block = b"a|b||"
    assert reframe(block, PRINTABLE, DEFAULT_MARKERS, "stage 't'") == b"a\nb\n\n"
    with pytest.raises(MarkerInMessage, match="stage 't'.*EOM marker 0x0a"):
        reframe(b"a\nb|", PRINTABLE, DEFAULT_MARKERS, "stage 't'")
    with pytest.raises(MarkerInMessage, match="EOP marker 0x23"):
        reframe(b"a#b\n", DEFAULT_MARKERS, PRINTABLE, "stage 't'")


def test_a_signal_in_the_middle_of_a_result_is_shown_with_the_bytes_before_it_and_itself_only():
    """The excerpt ends with the marker that cut the result short, whatever follows it."""
    with pytest.raises(ProtocolViolation, match="in the middle of a result") as caught:
        ReplyParser(DEFAULT_MARKERS).feed(b"done\npartial\x00next\n")
    assert caught.value.snippet == b"partial\x00"


def test_a_marker_where_none_may_be_is_shown_with_24_bytes_either_side():
    """The excerpt of a stray marker: up to 24 bytes before it, itself, and 23 after."""
    before, after = b"b" * 30, b"a" * 30
    eob = DEFAULT_MARKERS.EOB
    with pytest.raises(ProtocolViolation, match="wrote EOB") as caught:
        ReplyParser(DEFAULT_MARKERS).feed(before + eob + after)
    assert caught.value.snippet == b"b" * 24 + eob + b"a" * 23
    assert "bytes seen: " in str(caught.value)
    with pytest.raises(MarkerInMessage) as in_message:
        check_block_for(b"ok\n" + eob + b"x\n", DEFAULT_MARKERS, "stage 't'")
    assert in_message.value.snippet == b"ok\n" + eob + b"x\n"  # near the start: from byte 0


def test_markers_from_the_environment_default_the_ones_unset_or_empty():
    """A worker started by hand (no ETLSTAGE_* set, or set empty) speaks the default markers;
    the ones set are read as two hex digits."""
    assert Markers.from_env({}) == Markers()
    assert Markers.from_env({"ETLSTAGE_EOM": "", "ETLSTAGE_EOP": "7c"}) == Markers(eop=0x7C)
    with pytest.raises(MarkerError, match="ETLSTAGE_EOB='zz'"):
        Markers.from_env({"ETLSTAGE_EOB": "zz"})


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("10,0,23", "expected 4 comma-separated bytes"),
        ("10,0,23,17,5", "expected 4 comma-separated bytes"),
        ("", "expected 4 comma-separated bytes"),
        ("10,0,23,x", r"expected integers 0\.\.255"),
    ],
)
def test_a_markers_option_of_the_wrong_shape_says_what_is_wrong_with_it(text: str, why: str) -> None:
    """The Spark data sources' one-text markers option (Markers.to_option): a wrong count
    of bytes and a byte that is no number are told apart."""
    with pytest.raises(MarkerError, match=rf"markers option {re.escape(repr(text))}: {why}"):
        Markers.from_option(text)


@pytest.mark.parametrize("text", ["messageHeader/messageId", "#/messageHeader", "m"])
def test_a_json_pointer_without_its_leading_slash_is_refused_by_name(text: str) -> None:
    from etlstage.protocol.pointer import parse_pointer

    with pytest.raises(ValueError, match=re.escape(repr(text)) + ".*must start with '/'"):
        parse_pointer(text)
    assert parse_pointer("/" + text) == tuple(text.split("/"))  # the same with it: its tokens


def test_a_message_begun_in_one_chunk_is_too_long_once_its_end_in_the_next_takes_it_over_the_limit():
    """The bytes held from the last chunk count: a short chunk that ends a message begun
    before is still a message over ``max_message_bytes``."""
    parser = ReplyParser(DEFAULT_MARKERS, max_message_bytes=10)
    assert parser.feed(b"abcdefgh") == []  # 8 bytes held, no EOM yet
    with pytest.raises(ProtocolViolation, match="at least 12 bytes exceeds max_message_bytes=10"):
        parser.feed(b"ijkl\n")  # 4 more and its EOM: 12 bytes in all
