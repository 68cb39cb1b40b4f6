"""Every example in a docstring of the package and the stock workers runs and holds."""

from __future__ import annotations

import doctest
import importlib

import pytest

from tests.support.paths import ROOT

PACKAGES = {"etlstage": ROOT / "etlstage", "etlstage_workers": ROOT / "workers"}


def modules_with_examples() -> list[str]:
    names = []
    for package, folder in PACKAGES.items():
        for path in sorted(folder.rglob("*.py")):
            if ">>> " in path.read_text(encoding="utf-8"):
                parts = path.relative_to(folder).with_suffix("").parts
                names.append(".".join((package, *parts)).removesuffix(".__init__"))
    return names


MODULES = modules_with_examples()


def test_the_examples_are_found():
    assert len(MODULES) >= 15, MODULES  # framing, flow, replies, offsets, errors, harness, SDK, stock workers...


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples_hold(name: str) -> None:
    module = importlib.import_module(name)
    failed, tried = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert tried > 0, f"{name}: no example ran"
    assert failed == 0, f"{name}: {failed} of {tried} examples failed"
