"""Names the first-hour docs give are the files there are and what they do."""

from __future__ import annotations

import re

from tests.support.paths import ROOT


def test_every_file_of_the_examples_table_exists():
    text = (ROOT / "docs" / "writing-workers.md").read_text()
    # the table of workers/examples: the rows of the section that lists append.c
    section = next(part for part in re.split(r"^## ", text, flags=re.M) if "| `append.c` |" in part)
    named = re.findall(r"^\| `([\w.-]+)` \|", section, re.M)
    assert "first-pipeline.yaml" in named and len(named) > 5, named
    missing = [n for n in named if not (ROOT / "workers" / "examples" / n).exists()]
    assert not missing, f"docs/writing-workers.md names example files that do not exist: {missing}"


def test_the_stock_pipelines_header_names_the_format_its_loader_writes():
    head = (ROOT / "stages.yaml").read_text().splitlines()[0]
    loader = (ROOT / "workers" / "spark" / "loader.py").read_text()
    assert "Delta" in loader and "Delta" in head and "Parquet" not in head, head
