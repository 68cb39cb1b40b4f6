"""The package's layers point one way: a module imports only from layers below its own.

    9  cli
    8  engines                      (the Engine interface cli calls: each engine with what it shows)
    7  testing, observe             (the harness; metrics, status page and status)
    6  runtime, spark               (the two engines: the supervisor, the Spark query)
    5  kit, worker, native          (what both engines use; the worker SDK; the native-stage API)
    4  conversation, observe.document  (the conversation rules both engines follow; the status
                                    document both engines fill: types only)
    3  config
    2  state
    1  protocol
    0  errors, logs, redact

docs/architecture.md draws the same picture and says where a new feature goes.
"""

from __future__ import annotations

import ast

from tests.support.paths import ROOT

LAYERS = {
    "errors": 0,
    "logs": 0,
    "redact": 0,
    "hint": 0,
    "protocol": 1,
    "state": 2,
    "config": 3,
    "conversation": 4,
    "observe.document": 4,
    "kit": 5,
    "worker": 5,
    "native": 5,
    "runtime": 6,
    "spark": 6,
    "testing": 7,
    "observe": 7,
    "engines": 8,
    "cli": 9,
}


def layer_of(dotted: str) -> str:
    """The entry of LAYERS a module belongs to: a module of its own (``observe.document``), or its package."""
    parts = dotted.split(".")
    return ".".join(parts[:2]) if ".".join(parts[:2]) in LAYERS else parts[0]


def imports_of(package: str) -> list[tuple[str, str, int]]:
    """(file, imported etlstage package, line) for every import in ``package``."""
    base = ROOT / "etlstage"
    path = base / package.replace(".", "/")
    if path.with_suffix(".py").exists():
        files = [path.with_suffix(".py")]
    else:  # a package, less its modules that have a layer of their own
        files = [
            f
            for f in sorted(path.rglob("*.py"))
            if layer_of(".".join(f.relative_to(base).with_suffix("").parts)) == package
        ]
    found = []
    for f in files:
        for node in ast.walk(ast.parse(f.read_text(encoding="utf-8"))):
            names = []
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            for name in names:
                parts = name.split(".")
                target = layer_of(".".join(parts[1:])) if parts[0] == "etlstage" and len(parts) > 1 else package
                if target != package:
                    found.append((str(f.relative_to(ROOT)), target, node.lineno))
    return found


def test_every_package_has_a_layer():
    packages = {p.stem for p in (ROOT / "etlstage").iterdir() if p.suffix == ".py" or (p / "__init__.py").exists()}
    packages.discard("__init__")
    assert packages <= set(LAYERS), f"give {sorted(packages - set(LAYERS))} a layer here and in docs/architecture.md"


def test_imports_point_down():
    wrong = [
        f"{f}:{line}: {package} (layer {LAYERS[package]}) imports {target} (layer {LAYERS.get(target, '?')})"
        for package in LAYERS
        for f, target, line in imports_of(package)
        if LAYERS.get(target, 99) >= LAYERS[package]
    ]
    assert not wrong, "\n".join(wrong)


def test_neither_engine_imports_the_other():
    """What both engines need is in ``kit`` (or below): the supervisor and the Spark
    engine are siblings, whatever layer numbers they are given."""
    for engine, other in (("runtime", "spark"), ("spark", "runtime")):
        wrong = [f"{f}:{line}" for f, target, line in imports_of(engine) if target == other]
        assert not wrong, f"{engine} imports {other}: " + ", ".join(wrong)


def test_every_package_is_installed():
    """setup.cfg lists packages by name: a package missing there is missing from a wheel."""
    import configparser

    setup = configparser.ConfigParser()
    setup.read(ROOT / "setup.cfg")
    listed = set(setup["options"]["packages"].split())
    found = {
        ".".join(p.parent.relative_to(ROOT).parts)
        for p in (ROOT / "etlstage").rglob("__init__.py")
        if "__pycache__" not in p.parts
    }
    assert found - listed == set(), "add these to packages in setup.cfg"


def test_the_conversation_rules_import_no_engine_and_do_no_io():
    """Both engines follow the rules of ``conversation``: it imports neither, nor
    anything that waits, spawns or reads a clock (``hashlib`` computes: batch ids, result fingerprints)."""
    allowed = {"__future__", "bisect", "collections", "enum", "etlstage", "hashlib", "math", "statistics", "typing"}
    for f in sorted((ROOT / "etlstage" / "conversation").rglob("*.py")):
        for node in ast.walk(ast.parse(f.read_text(encoding="utf-8"))):
            names = []
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            for name in names:
                top = name.split(".")[0]
                assert top in allowed, f"{f.relative_to(ROOT)}:{node.lineno}: imports {name}"
                if top == "etlstage":
                    assert name.split(".")[1] in {"config", "errors", "protocol"}, f"{f.name}:{node.lineno}: {name}"


def test_loading_a_pipeline_file_does_not_start_the_runtime():
    import subprocess
    import sys

    code = (
        "import sys, etlstage.config.loader as l; "
        "print(sorted(m for m in sys.modules if m.startswith('etlstage.runtime') or m in ('psutil', 'fcntl')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
