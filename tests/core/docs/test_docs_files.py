"""Every repository file a page names exists, and a YAML block a page gives as a file is that file."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
import yaml

from tests.support.paths import ROOT

PAGES = sorted(
    {ROOT / "README.md", *(ROOT / "docs").rglob("*.md"), *(ROOT / "workers").rglob("README.md")}
    - set((ROOT / "workers").rglob("node_modules/**/README.md"))
)
TOP = ("workers", "docs", "etlstage", "tests", "bench")
# `workers/examples/...` or a link target, wherever a page writes one
PATH = re.compile(r"(?<![\w./-])((?:" + "|".join(TOP) + r")/[\w./-]*\w)")
LINK = re.compile(r"\]\(([^)\s]+)\)")
FILE_NAME = re.compile(r"`([\w.-]+\.(?:py|js|c|sh|yaml|yml|md|json|toml))`")
SH_BLOCK = re.compile(r"```(?:sh|bash|console)\n(.*?)```", re.S)
GIVEN_AS = re.compile(r"`([\w./-]+\.ya?ml)`:\s*\n\s*```ya?ml\n(.*?)```", re.S)
# written by a run, not kept in the repository
MADE_BY_A_RUN = ("output/",)


def rel(page: Path) -> str:
    return str(page.relative_to(ROOT))


def named_files(page: Path) -> list[str]:
    """Each path ``page`` names that does not exist, with what named it."""
    text = page.read_text()
    missing = []
    for m in LINK.finditer(text):
        target = m.group(1).split("#")[0]
        if target and not re.match(r"^[a-z]+:", target) and not (page.parent / target).exists():
            missing.append(f"link ({target})")
    for m in PATH.finditer(text):
        p = m.group(1)
        if any(made in p for made in MADE_BY_A_RUN):
            continue
        if not (ROOT / p).exists() and not (page.parent / p).exists():
            missing.append(p)
    if page.name == "README.md" and page.parent != ROOT:
        # a folder's README lists its files by name
        missing += [f"`{n}`" for n in FILE_NAME.findall(text) if not (page.parent / n).exists()]
    for block in SH_BLOCK.findall(text):
        for line in block.splitlines():
            # cd DIR && ... FILE.yaml: the file is in DIR
            m = re.match(r"\s*cd\s+(\S+)\s*&&(.*)", line)
            if m:
                folder = ROOT / m.group(1)
                for arg in shlex.split(m.group(2), comments=True):
                    if re.fullmatch(r"[\w./-]+\.ya?ml", arg) and not (folder / arg).exists():
                        missing.append(f"{m.group(1)}/{arg}")
    return missing


@pytest.mark.parametrize("page", PAGES, ids=rel)
def test_every_file_a_page_names_exists(page: Path):
    assert named_files(page) == [], f"{rel(page)} names files that do not exist"


def given_files():
    for page in PAGES:
        for name, block in GIVEN_AS.findall(page.read_text()):
            yield pytest.param(page, name, block, id=f"{rel(page)}:{name}")


GIVEN = list(given_files())


def test_the_pages_give_files_as_yaml_blocks():
    assert {name for _, name, _ in (p.values for p in GIVEN)} >= {
        "workers/examples/first-pipeline.yaml",
        "workers/examples/spark-example.yaml",
    }


@pytest.mark.parametrize("page, name, block", GIVEN)
def test_a_yaml_block_given_as_a_file_is_that_file(page: Path, name: str, block: str):
    path = ROOT / name if (ROOT / name).exists() else page.parent / name
    assert path.exists(), f"{rel(page)} shows {name}, which does not exist"
    assert yaml.safe_load(block) == yaml.safe_load(path.read_text()), f"{rel(page)}'s {name} is not the file"


def test_a_missing_file_is_caught(tmp_path: Path):
    page = tmp_path / "docs" / "page.md"
    page.parent.mkdir()
    page.write_text(
        "See [the guide](nowhere.md) and `workers/examples/nothing.yaml`.\n"
        "```sh\ncd workers/examples && etlstage run --once absent.yaml\n```\n"
    )
    assert named_files(page) == [
        "link (nowhere.md)",
        "workers/examples/nothing.yaml",
        "workers/examples/absent.yaml",
    ]
