"""The whole official example set through the worker, under both spec versions and both schema sources."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from .conftest import OFFICIAL, compact, route, run_batches
from .test_schemas import examples_302, examples_400


def _clean(doc: dict[str, Any]) -> dict[str, Any]:
    doc = dict(doc, messageHeader=dict(doc["messageHeader"]))
    doc["messageHeader"].pop("errorCode", None)  # some official examples carry one; it would route them
    doc["messageHeader"].pop("errorDescription", None)
    return doc


@pytest.mark.parametrize("spec", ["3.0.2", "4.0.0"])
@pytest.mark.parametrize("official_dir", [False, True], ids=["etlstage-schemas", "schema-dir"])
def test_every_official_example_passes_the_worker(tmp_path: Path, spec: str, official_dir: bool) -> None:
    examples = examples_302() if spec == "3.0.2" else examples_400()
    batch = [compact(_clean(doc)) for _, doc in examples]
    opts: dict[str, Any] = {"spec": spec, "check_expiry": False}  # the examples expired in 2004
    if official_dir:
        opts["schema_dir"] = str(OFFICIAL / spec)
    results = run_batches([batch], tmp_path / "state", **opts)
    assert route(results) == [("valid", None)] * len(batch)


def test_a_302_message_is_not_a_400_message(tmp_path: Path) -> None:
    [(_, doc)] = examples_302()[:1]
    results = run_batches([[compact(_clean(doc))]], tmp_path / "state", spec="4.0.0", check_expiry=False)
    assert route(results) == [("invalid", "GENERR004")]
    assert "missing required field 'tenantJiscID'" in results[0]["messageHeader"]["errorDescription"]
