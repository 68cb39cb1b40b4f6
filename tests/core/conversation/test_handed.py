"""The rule on a T-job's re-answer (etlstage.conversation.handed): hand on only what did
not go on before; on any doubt, hand on."""

from __future__ import annotations

from etlstage.conversation.handed import Handed


def test_a_re_answer_equal_to_what_went_on_is_not_handed_on_again() -> None:
    h = Handed()
    h.handing(b"a\nb\n")
    h.sent_again()
    assert h.block is None and len(h.prints) == 1  # the bytes let go, their fingerprint kept
    assert not h.hand_on(b"a\nb\n", deterministic=True)


def test_a_mismatch_goes_on_and_both_answers_are_remembered() -> None:
    h = Handed()
    h.handing(b"a\n")
    h.sent_again()
    assert h.hand_on(b"a2\n", deterministic=True)
    h.handing(b"a2\n")  # the driver hands it on
    h.sent_again()
    assert not h.hand_on(b"a\n", deterministic=True) and not h.hand_on(b"a2\n", deterministic=True)
    assert h.hand_on(b"a3\n", deterministic=True)


def test_an_answer_compared_before_it_was_fingerprinted_matches_by_its_bytes() -> None:
    h = Handed()
    h.handing(b"x\n")
    assert not h.hand_on(b"x\n", deterministic=True) and h.hand_on(b"y\n", deterministic=True)


def test_nothing_handed_on_or_not_deterministic_always_hands_on() -> None:
    assert Handed().hand_on(b"a\n", deterministic=True)
    h = Handed()
    h.handing(b"a\n")
    h.sent_again()
    assert h.hand_on(b"a\n", deterministic=False)


def test_every_answer_handed_on_is_remembered_not_only_the_last() -> None:
    """A job that handed on twice before it was sent again (a re-answer that differed)
    remembers both: either repeated later is not handed on a third time (mutation seed
    109: keeping only the last block survived)."""
    h = Handed()
    h.handing(b"first\n")
    h.handing(b"second\n")
    h.sent_again()
    assert not h.hand_on(b"first\n", deterministic=True)
    assert not h.hand_on(b"second\n", deterministic=True)
    assert h.hand_on(b"third\n", deterministic=True)
