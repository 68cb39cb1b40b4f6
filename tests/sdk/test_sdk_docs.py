"""The worker examples in docs/sdk/*.md run as written: each page's transformer passes
`etlstage check-worker` in every T mode, and its unit test passes in its own language."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.support.run_cli import etlstage

ROOT = Path(__file__).resolve().parents[2]
SDK = ROOT / "sdk"


def blocks(page: str, lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", (ROOT / "docs" / "sdk" / page).read_text(), re.S)


def check_worker(tmp: Path, *argv: str) -> None:
    r = etlstage(tmp, "check-worker", "--type", "T", "--", *argv, timeout=300)
    assert r.code == 0, r.stdout + r.stderr
    assert "8 passed, 0 failed" in r.stdout, r.stdout


def test_node_page(tmp_path: Path) -> None:
    if shutil.which("node") is None:
        pytest.skip("node is not installed")
    (tmp_path / "node_modules").mkdir()
    (tmp_path / "node_modules" / "etlstage-worker").symlink_to(SDK / "node")  # what npm install makes
    worker, unit = blocks("node.md", "js")
    (tmp_path / "shout.js").write_text(worker)
    check_worker(tmp_path, "node", str(tmp_path / "shout.js"))
    (tmp_path / "shout.test.js").write_text(unit)
    r = subprocess.run(["node", "--test", "shout.test.js"], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr


def test_go_page(tmp_path: Path) -> None:
    if shutil.which("go") is None:
        pytest.skip("go is not installed")
    worker, unit = blocks("go.md", "go")
    install = [line.split("#")[0].split() for line in blocks("go.md", "sh")[0].splitlines()]  # as written

    def go(*args: str) -> None:
        r = subprocess.run(["go", *args], cwd=tmp_path, capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, r.stdout + r.stderr

    for argv in install:
        go(*(a.replace("/path/to/etlstage/sdk/go", str(SDK / "go")) for a in argv[1:]))
    (tmp_path / "main.go").write_text(worker)
    imports = 'package main\n\nimport (\n\t"bytes"\n\t"strings"\n\t"testing"\n\n\t"etlstage/worker"\n)\n\n'
    (tmp_path / "main_test.go").write_text(imports + unit)
    go("test", "./...")
    go("build", "-o", "shout", ".")
    check_worker(tmp_path, str(tmp_path / "shout"))
