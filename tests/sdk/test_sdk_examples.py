"""Every SDK's example workers pass `etlstage check-worker` in every mode they declare."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.support.run_cli import etlstage

ROOT = Path(__file__).resolve().parents[2]
SDK = ROOT / "sdk"

# (language, stage type, argv): each worker is checked in every mode of its type.
EXAMPLES = [
    ("node", "T", ["node", str(SDK / "node/examples/upper.js")]),
    ("node", "E", ["node", str(SDK / "node/examples/count.js"), "10"]),
    ("node", "L", ["node", str(SDK / "node/examples/sink.js"), "{out}"]),
    ("go", "T", ["{go}/upper"]),
    ("go", "E", ["{go}/count", "10"]),
    ("go", "L", ["{go}/sink", "{out}"]),
]


@pytest.mark.parametrize(("language", "kind", "argv"), EXAMPLES, ids=[f"{lang}-{kind}" for lang, kind, _ in EXAMPLES])
def test_example_passes_check_worker(
    language: str, kind: str, argv: list[str], tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    if language == "go":
        go_bin = request.getfixturevalue("go_examples")
        argv = [a.replace("{go}", str(go_bin)) for a in argv]
    elif shutil.which(argv[0]) is None:
        pytest.skip(f"{argv[0]} is not installed")
    argv = [a.replace("{out}", str(tmp_path / "sink.out")) for a in argv]
    r = etlstage(tmp_path, "check-worker", "--type", kind, "--", *argv, timeout=300)
    assert r.code == 0, r.stdout + r.stderr
    assert " 0 failed" in r.stdout
    if kind == "L":
        assert (tmp_path / "sink.out").stat().st_size > 0  # it loaded what it acknowledged
