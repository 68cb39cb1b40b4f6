"""Offset policies of supervisor-managed extraction: the windows they cut and what they refuse."""

from __future__ import annotations

import pytest

from etlstage.errors import ConfigError
from etlstage.protocol.offsets import make_policy


def test_a_counter_policy_with_step_1_cuts_windows_of_one() -> None:
    policy = make_policy("counter", 5, 1, None, "stages[0].offset_policy")
    assert policy.first() == 5
    assert policy.window(5) == (5, 6)
    assert policy.window(6) == (6, 7)


@pytest.mark.parametrize(("start", "step"), [(0, 0), (0, -3), (0, "10"), ("0", 10), (0, 1.5)])
def test_a_counter_policy_refuses_a_step_below_1_or_anything_not_an_integer(start: object, step: object) -> None:
    with pytest.raises(ConfigError) as err:
        make_policy("counter", start, step, None, "stages[0].offset_policy")
    assert f"stages[0].offset_policy: a counter policy needs integer start and step >= 1, got start={start!r}" in str(
        err.value
    )


@pytest.mark.parametrize("step", ["PT0S", 0])
def test_a_time_policy_refuses_a_step_of_no_time(step: object) -> None:
    with pytest.raises(ConfigError, match=r"stages\[1\]\.offset_policy\.step: .* is no time"):
        make_policy("time", "2026-01-01T00:00:00Z", step, None, "stages[1].offset_policy")


def test_a_time_policy_cuts_windows_of_its_step_from_its_start() -> None:
    policy = make_policy("time", "2026-01-01T00:00:00Z", "PT6H", "PT0S", "stages[1].offset_policy")
    assert policy.window("2026-01-01T00:00:00Z") == ("2026-01-01T00:00:00Z", "2026-01-01T06:00:00Z")


@pytest.mark.parametrize("start", ["yesterday", 12.5, "2026-13-01T00:00:00Z"])
def test_a_time_policy_refuses_a_start_that_is_no_instant(start: object) -> None:
    with pytest.raises(ConfigError, match=r"stages\[1\]\.offset_policy\.start: .* is not an ISO-8601 instant such as"):
        make_policy("time", start, "PT1H", None, "stages[1].offset_policy")


@pytest.mark.parametrize(
    ("kind", "start", "step", "lag", "later"),
    [
        ("counter", 0, 10, None, 10),
        ("time", "2026-01-01T00:00:00Z", "PT1H", None, "2026-01-01T01:00:00Z"),
        ("time", "2999-01-01T00:00:00Z", "PT1H", "PT5M", "2999-01-01T01:00:00Z"),  # not over for centuries
    ],
)
def test_a_window_is_ready_exactly_when_its_policy_says_there_is_nothing_to_wait_for(
    kind: str, start: object, step: object, lag: object, later: object
) -> None:
    """The supervisor asks ``wait_seconds`` how long to sleep while ``window`` is None: the two
    agree for every policy (0 when the window can be cut, above 0 when not)."""
    policy = make_policy(kind, start, step, lag, "stages[0].offset_policy")
    for s in (policy.first(), later):
        ready, wait = policy.window(s) is not None, policy.wait_seconds(s)
        assert isinstance(wait, float)
        assert (wait == 0.0) == ready, (s, wait)
