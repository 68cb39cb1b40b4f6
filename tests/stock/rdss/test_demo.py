"""The demo traffic generator: deterministic, transportable, and its expectations are exact."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from etlstage_workers.rdss.codes import queue_of
from etlstage_workers.rdss.demo import FORBIDDEN, KINDS, generate
from etlstage_workers.rdss.schemas import load_schema_set, schema_key

from .conftest import OFFICIAL, run_batches

ROOT = Path(__file__).resolve().parents[3]


def test_same_seed_same_data_and_no_marker_bytes() -> None:
    a, ea = generate(400, 11)
    b, eb = generate(400, 11)
    assert a == b and ea == eb and len(a) == 400
    assert generate(400, 12)[0] != a
    assert not any(m in r for r in a for m in FORBIDDEN)


def test_mix_covers_every_case() -> None:
    records, expected = generate(1000, 5)
    c = expected["counts"]
    assert set(c["per_error_code"]) == {
        "GENERR001",
        "GENERR002",
        "GENERR003",
        "GENERR004",
        "GENERR006",
        "GENERR007",
        "GENERR010",
    }
    assert c["sequences"] >= 5 and c["duplicates"] >= 10
    oversized = [r for r in records if len(r) > 1_024_000]
    assert len(oversized) == 1 and 1_024_001 <= len(oversized[0]) <= 1_040_000
    kinds = set()
    for r in records:
        try:
            h = json.loads(r)["messageHeader"]
        except (ValueError, TypeError, KeyError):
            continue
        kinds.add((h.get("messageType"), h.get("messageClass")))
    assert set(KINDS) <= kinds


def test_valid_demo_messages_pass_the_official_schemas() -> None:
    records, expected = generate(300, 3)
    official = load_schema_set("3.0.2", OFFICIAL / "3.0.2")
    checked = 0
    for r in records:
        try:
            doc = json.loads(r)
        except ValueError:
            continue
        h = doc["messageHeader"]
        if expected["messages"].get(h["messageId"], {}).get("table") == "valid" and h["messageSequence"]["total"] == 1:
            key = schema_key(h["messageType"], h["messageClass"], "3.0.2")
            assert list(official.explain[key].iter_errors(doc)) == []
            checked += 1
    assert checked > 150


def test_the_worker_puts_every_message_exactly_where_expected(tmp_path: Path) -> None:
    records, expected = generate(1500, 9)
    batches = [records[i : i + 200] for i in range(0, len(records), 200)]
    tables: dict[str, dict[str, object]] = {}
    for r in run_batches(batches, tmp_path / "state"):
        h = r["messageHeader"]
        tables[h["messageId"]] = {"table": queue_of(h.get("errorCode")), "errorCode": h.get("errorCode")}
    assert tables == expected["messages"]
    assert not set(expected["absorbed_parts"]) & set(tables)


def test_cli_writes_records_and_expectations(tmp_path: Path) -> None:
    out, exp = tmp_path / "r.jsonl", tmp_path / "e.json"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    subprocess.run(
        [
            sys.executable,
            "-m",
            "etlstage_workers.rdss",
            "demo-data",
            "--count",
            "120",
            "--seed",
            "4",
            "--out",
            str(out),
            "--expected",
            str(exp),
        ],
        check=True,
        env=env,
        timeout=60,
    )
    lines = out.read_bytes().split(b"\n")
    assert lines[-1] == b"" and lines[:-1] == generate(120, 4)[0]
    assert json.loads(exp.read_text())["counts"]["records"] == 120
