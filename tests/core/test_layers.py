"""The package's layers point one way: a module imports only from layers below its own.

    9  cli
    8  engines                      (the Engine interface cli calls: each engine with what it shows)
    7  testing, observe, sparkapi   (the harness; metrics, status page and status; the Spark helpers' public names)
    6  runtime, spark               (the two engines: the supervisor, the Spark query)
    5  kit, worker, native          (what both engines use; the worker SDK; the native-stage API)
    4  conversation, observe.document  (the conversation rules both engines follow; the status
                                    document both engines fill: types only)
    3  config
    2  state
    1  protocol
    0  errors, logs, redact

No module imports itself back through others (an import circle), at module level or
inside a function.  The stock workers (``workers/``) import only the public API (PUBLIC_API).
docs/architecture.md draws the same picture and says where a new feature goes.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterator
from pathlib import Path

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
    "sparkapi": 7,
    "engines": 8,
    "cli": 9,
}

# What the stock workers (workers/, the proof that the public API suffices) may import:
# these modules and, for a package, its modules (docs/architecture.md, "The public API").
PUBLIC_API = (
    "etlstage.errors",
    "etlstage.logs",
    "etlstage.protocol.framing",
    "etlstage.protocol.markers",
    "etlstage.protocol.pointer",
    "etlstage.protocol.scenario",
    "etlstage.protocol.vocabulary",
    "etlstage.worker",
    "etlstage.native",
    "etlstage.sparkapi",
)


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


def imported(tree: ast.AST, known: Callable[[str], bool] = lambda name: True) -> Iterator[tuple[str, int]]:
    """(module, line) for every absolute import in ``tree``, at any depth (in a function,
    under ``TYPE_CHECKING``): ``from p import m`` names ``p.m`` when ``known(p.m)``, a module."""
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                sub = f"{node.module}.{alias.name}"
                yield (sub if known(sub) else node.module), node.lineno
        elif isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node.lineno


def etlstage_modules() -> dict[str, Path]:
    """Every module of the package by dotted name (a package by its own name)."""
    modules = {}
    for f in sorted((ROOT / "etlstage").rglob("*.py")):
        parts = f.relative_to(ROOT).with_suffix("").parts
        modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = f
    return modules


def import_graph() -> dict[str, set[str]]:
    """Which etlstage modules each etlstage module imports (itself left out)."""
    modules = etlstage_modules()
    return {
        name: {m for m, _ in imported(ast.parse(f.read_text(encoding="utf-8")), modules.__contains__) if m in modules}
        - {name}
        for name, f in modules.items()
    }


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One circle (``[a, b, …, a]``) through each group of modules that reach one another."""
    found: list[list[str]] = []
    seen: set[str] = set()
    for start in sorted(graph):
        if start in seen:
            continue
        # the shortest way back to start, breadth first
        back: dict[str, str] = {}
        queue = [start]
        while queue and start not in back:
            here = queue.pop(0)
            for there in sorted(graph[here]):
                if there not in back:
                    back[there] = here
                    queue.append(there)
        if start in back:
            circle = [start]
            while len(circle) == 1 or circle[-1] != start:
                circle.append(back[circle[-1]])
            circle.reverse()
            found.append(circle)
            seen.update(circle)
    return found


def test_no_module_imports_itself_back():
    """An import circle (two modules importing each other, perhaps through others or from
    inside a function) means neither can be read, tested or moved alone: the piece both
    need goes down into one of them, or into a module of its own."""
    found = cycles(import_graph())
    assert not found, "import circles:\n" + "\n".join(" -> ".join(c) for c in found)


def test_the_cycle_finder_finds_one_through_a_function_level_import():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [["a", "b", "c", "a"]]
    assert cycles({"a": {"b"}, "b": set()}) == []
    tree = ast.parse("def f():\n    from etlstage.spark import driver_line\n")
    assert list(imported(tree, {"etlstage.spark.driver_line"}.__contains__)) == [("etlstage.spark.driver_line", 2)]


def is_public(module: str) -> bool:
    return any(module == p or module.startswith(p + ".") for p in PUBLIC_API)


def test_the_stock_workers_use_the_public_api_only():
    """The stock workers are the proof that the public API suffices (docs/architecture.md):
    each of their imports of etlstage, at any depth, is of a module of PUBLIC_API, and of no ``_name``."""
    wrong = []
    for f in sorted((ROOT / "workers").rglob("*.py")):
        for node in ast.walk(ast.parse(f.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [a.name for a in node.names]
                # from etlstage import worker: the module is etlstage.worker
                modules = [f"etlstage.{n}" for n in names] if node.module == "etlstage" else [node.module]
            elif isinstance(node, ast.Import):
                names, modules = [], [a.name for a in node.names]
            else:
                continue
            if modules[0].split(".")[0] != "etlstage":
                continue
            if not all(map(is_public, modules)) or any(n.startswith("_") for n in names):
                wrong.append(f"{f.relative_to(ROOT)}:{node.lineno}: {ast.unparse(node)}")
    assert not wrong, "imports of private etlstage modules or names:\n" + "\n".join(wrong)


def test_every_public_module_exists():
    modules = etlstage_modules()
    assert [p for p in PUBLIC_API if p not in modules] == []


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


def test_the_spark_engine_s_groups_point_one_way():
    """``spark/tasks/`` (Spark's Python processes) imports nothing of ``spark/driver/`` (the
    driver process), and ``spark/setup/`` (a JVM's start) nothing of either: what a task
    needs travels in its plan, never through the driver's modules."""
    forbidden = {"etlstage.spark.tasks": ("driver",), "etlstage.spark.setup": ("driver", "tasks")}
    graph = import_graph()
    assert any(m.startswith("etlstage.spark.tasks.") for m in graph)  # the groups exist
    wrong = [
        f"{module} imports {target}"
        for module, targets in sorted(graph.items())
        for group, others in forbidden.items()
        if module.startswith(group + ".")
        for target in sorted(targets)
        if any(target.startswith(f"etlstage.spark.{other}.") for other in others)
    ]
    assert not wrong, "\n".join(wrong)


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
    allowed = {
        *("__future__", "bisect", "collections", "dataclasses", "enum", "etlstage", "hashlib", "math", "statistics"),
        "typing",
    }
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
                    own = {"config", "conversation", "errors", "protocol"}  # conversation: its own modules
                    assert name.split(".")[1] in own, f"{f.name}:{node.lineno}: {name}"


def test_loading_a_pipeline_file_does_not_start_the_runtime():
    import subprocess
    import sys

    code = (
        "import sys, etlstage.config.loader as l; "
        "print(sorted(m for m in sys.modules if m.startswith('etlstage.runtime') or m in ('psutil', 'fcntl')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_the_public_names_are_the_engines_own_not_copies():
    """A public module that stands for private ones re-exports each name (one rule, one place)."""
    import importlib

    implementations = {
        "etlstage.sparkapi": [
            "etlstage.spark.driver_line",
            "etlstage.spark.setup.jars",
            "etlstage.spark.driver.listener",
            "etlstage.spark.setup.spark_session",
        ],
        "etlstage.worker.sqlite": ["etlstage.state.sqlite"],
        "etlstage.worker.durable": ["etlstage.state.durable"],
    }
    for public_name, private_names in implementations.items():
        public = importlib.import_module(public_name)
        private = [importlib.import_module(p) for p in private_names]
        for name in public.__all__:
            value = getattr(public, name)
            assert any(getattr(m, name, None) is value for m in private), f"{public_name}.{name}: not re-exported"


def test_the_spark_api_imports_no_pyspark():
    """A worker imports etlstage.sparkapi at module level: pyspark (and its JVM) come only
    with the call that needs them."""
    import subprocess
    import sys

    code = (
        "import sys, etlstage.sparkapi; print(sorted(m for m in sys.modules if m.split('.')[0] in ('pyspark', 'py4j')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
