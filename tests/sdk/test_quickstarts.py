"""Every SDK's quick start runs as written, in a clean folder: its shell steps in order
(the checkout's path put in for /path/to/etlstage), its files written under the names
their first comment gives, and the `etlstage check-worker` it ends with passing."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FENCE = re.compile(r"```(\w+)\n(.*?)```", re.S)
FILE_COMMENT = re.compile(r"^(?://|#)\s*([\w./-]+\.\w+)\s*$")


def quick_start(readme: Path) -> list[tuple[str, str]]:
    """The fenced blocks of ``readme``'s quick start section, in order."""
    text = readme.read_text()
    start = re.search(r"^#+ Quick start\s*$", text, re.M)
    assert start, f"{readme} has no quick start"
    rest = text[start.end() :]
    unfenced = FENCE.sub(lambda m: " " * len(m.group(0)), rest)  # a "# file" comment is no heading
    end = re.search(r"^#+ ", unfenced, re.M)
    return FENCE.findall(rest[: end.start()] if end else rest)


def run_quick_start(readme: Path, folder: Path) -> str:
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"  # etlstage, python: the set-up's
    out = []
    ran_check = False
    for lang, body in quick_start(readme):
        body = body.replace("/path/to/etlstage", str(ROOT))
        if lang == "sh":
            r = subprocess.run(
                ["bash", "-euo", "pipefail", "-c", body],
                cwd=folder,
                env=env,
                capture_output=True,
                text=True,
                timeout=900,
            )
            assert r.returncode == 0, f"{readme}: step failed:\n{body}\n{r.stdout}\n{r.stderr}"
            out.append(r.stdout)
            ran_check = ran_check or "etlstage check-worker" in body
        else:
            named = FILE_COMMENT.match(body.splitlines()[0])
            assert named, f"{readme}: a {lang} block of the quick start does not name its file"
            path = folder / named.group(1)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(body)
    assert ran_check, f"{readme}: the quick start never checks the worker"
    return "".join(out)


def needs(*tools: str) -> None:
    for tool in tools:
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is not installed")


@pytest.mark.parametrize(
    ("readme", "tools"),
    [
        ("README.md", ()),
        ("sdk/node/README.md", ("node", "npm")),
        pytest.param("sdk/go/README.md", ("go",), marks=pytest.mark.slow),
        pytest.param("sdk/rust/README.md", ("cargo",), marks=pytest.mark.slow),
        pytest.param("sdk/java/README.md", ("mvn", "javac"), marks=pytest.mark.slow),
    ],
)
def test_the_quick_start_runs_as_written(readme: str, tools: tuple[str, ...], tmp_path: Path) -> None:
    needs(*tools)
    out = run_quick_start(ROOT / readme, tmp_path)
    assert "8 passed, 0 failed" in out, out
