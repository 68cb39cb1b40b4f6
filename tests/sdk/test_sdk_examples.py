"""Every SDK's example workers pass `etlstage check-worker` in every mode they declare."""

from __future__ import annotations

import os
import shutil
import subprocess
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


# languages whose example loader commits each batch by its id (FileSink): checked with batch ids
BATCH_IDS = {"node", "go"}


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
    ids = kind == "L" and language in BATCH_IDS
    r = etlstage(tmp_path, "check-worker", "--type", kind, *(["--batch-id"] if ids else []), "--", *argv, timeout=300)
    assert r.code == 0, r.stdout + r.stderr
    assert " 0 failed" in r.stdout
    if ids:  # a batch sent again after a crash is loaded once, seen in the folder it reports
        assert "PASS  batch ids: a batch sent again" in r.stdout and "partly" not in r.stdout
        assert any((tmp_path / "sink.out").iterdir())  # it loaded what it acknowledged
    elif kind == "L":
        assert (tmp_path / "sink.out").stat().st_size > 0  # it loaded what it acknowledged


def _stray_output_run(argv: list[str], cwd: Path) -> subprocess.CompletedProcess[bytes]:
    env = {**os.environ, "ETLSTAGE_TYPE": "T", "ETLSTAGE_MODE": "single"}
    return subprocess.run(argv, input=b"a\nb\n", capture_output=True, env=env, cwd=cwd, timeout=120)


def test_node_worker_stray_console_output_goes_to_stderr(tmp_path: Path) -> None:
    if shutil.which("node") is None:
        pytest.skip("node is not installed")
    (tmp_path / "noisy.js").write_text(
        f"const {{ runTransformer }} = require({str(SDK / 'node')!r});\n"
        "runTransformer((ms) => { console.log('working on', ms.length); process.stdout.write('raw\\n'); return ms; });\n"
    )
    r = _stray_output_run(["node", "noisy.js"], tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout == b"a\n\x00b\n\x00"
    assert r.stderr.count(b"working on 1") == 2 and r.stderr.count(b"raw") == 2


def test_go_worker_stray_print_goes_to_stderr(tmp_path: Path, go_examples: Path) -> None:
    (tmp_path / "go.mod").write_text(
        f"module noisy\n\ngo 1.21\n\nrequire etlstage/worker v0.0.0\n\nreplace etlstage/worker => {SDK / 'go'}\n"
    )
    (tmp_path / "main.go").write_text(
        'package main\n\nimport (\n\t"fmt"\n\n\t"etlstage/worker"\n)\n\n'
        "func main() {\n"
        "\tworker.Main(worker.TransformFunc(func(ms [][]byte) ([][]byte, error) {\n"
        '\t\tfmt.Println("working on", len(ms))\n'
        "\t\treturn ms, nil\n"
        "\t}))\n}\n"
    )
    subprocess.run(["go", "build", "-o", "noisy", "."], cwd=tmp_path, check=True, capture_output=True, timeout=600)
    r = _stray_output_run([str(tmp_path / "noisy")], tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout == b"a\n\x00b\n\x00"
    assert r.stderr.count(b"working on 1") == 2
