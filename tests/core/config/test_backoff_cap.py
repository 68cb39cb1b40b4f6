"""ETLSTAGE_RESTART_BACKOFF_MAX caps every stage's restart wait (what `etlstage test` sets)."""

from __future__ import annotations

import pytest

from etlstage.config.loader import parse_config
from etlstage.errors import ConfigError

PIPELINE = """
stages:
  - {name: src, type: E, command: [a]}
  - {name: t, type: T, restart: {backoff: 4, backoff_max: 60}, command: [b]}
  - {name: sink, type: L, command: [c]}
"""


def test_the_cap_applies_to_every_stage_and_keeps_the_tries():
    capped = parse_config(PIPELINE, environ={"ETLSTAGE_RESTART_BACKOFF_MAX": "0.1"})
    assert {(s.restart.backoff, s.restart.backoff_max, s.restart.max_restarts) for s in capped.stages} == {
        (0.1, 0.1, 5)
    }
    plain = parse_config(PIPELINE, environ={})
    assert (plain.stages[1].restart.backoff, plain.stages[1].restart.backoff_max) == (4, 60)


@pytest.mark.parametrize("value", ["soon", "-1", "nan"])
def test_a_wrong_cap_is_named(value):
    with pytest.raises(ConfigError, match=rf"ETLSTAGE_RESTART_BACKOFF_MAX='{value}': expected seconds"):
        parse_config(PIPELINE, environ={"ETLSTAGE_RESTART_BACKOFF_MAX": value})
