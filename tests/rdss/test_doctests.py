"""The examples in the RDSS modules' docstrings run."""

from __future__ import annotations

import doctest
import importlib

import pytest


@pytest.mark.parametrize("name", ["codes", "compiler", "explain", "formats", "output", "reassembly"])
def test_docstring_examples(name: str) -> None:
    module = importlib.import_module(f"etlstage_workers.rdss.{name}")
    failed, tried = doctest.testmod(module)
    assert tried > 0 and failed == 0
