"""Waiting on a condition instead of sleeping a fixed time: poll until it holds, fail after
a bounded time with what was awaited."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

import pytest

T = TypeVar("T")


def wait_for(condition: Callable[[], T], within: float, what: str, every: float = 0.1) -> T:
    """The first truthy value of ``condition()``, polled every ``every`` s; fails after ``within`` s."""
    deadline = time.monotonic() + within
    while True:
        got = condition()
        if got:
            return got
        if time.monotonic() >= deadline:
            pytest.fail(f"waited {within:g}s for {what}")
        time.sleep(every)


def stays(condition: Callable[[], bool], duration: float, every: float = 0.05) -> bool:
    """Whether ``condition()`` holds at every poll for ``duration`` s: for what must not happen
    (no event to wait on), checked throughout rather than once after a sleep."""
    deadline = time.monotonic() + duration
    while time.monotonic() < deadline:
        if not condition():
            return False
        time.sleep(every)
    return condition()
