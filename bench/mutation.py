"""Mutation testing of the core: does a test fail when the code behind a guarantee changes?

    python bench/mutation.py --sample 60 --seed 1            # a random sample, a report
    python bench/mutation.py --list                          # every mutant, nothing run
    python bench/mutation.py etlstage/runtime/pipeline.py    # only these files
    python bench/mutation.py --sample 40 --jobs 1             # one mutant at a time

One mutation at a time, applied to a copy of the checkout (the working tree is never
touched): a comparison flipped (``<`` to ``>=``, ``==`` to ``!=``, ``in`` to ``not in``), a
boundary moved (``<`` to ``<=``), an integer off by one, ``and``/``or`` swapped, a ``not``
dropped, a statement dropped (``pass`` in its place), a function returning at once. For each
mutant the fast tests of its module run (``-m "not slow"``, ``-x``, with a time limit); a
failure or a time-out kills the mutant, a pass lets it survive. The report lists the
survivors: each is a change no fast test notices.

With ``coverage`` installed, the unmutated run also records which test executes which line
(pytest-cov's per-test contexts), and each mutant first runs only the tests that execute its
lines: most mutants die there in seconds. A mutant they do not kill still runs its module's
whole list before it is called a survivor (a worker process's lines are not in that map), so
the selection changes the time a run takes, never its verdicts.

Mutants run ``--jobs`` at a time (default: one per core), each job in its own copy of the
checkout; the time limit is set from the unmutated run, which runs alone.

Mutants are generated from the syntax tree (``ast``), so each is valid Python; the modules
are ``protocol/``, ``kit/``, ``runtime/``, ``state/``, ``conversation/`` and
``spark/tasks/conversation.py`` by default.
Logging calls and docstrings are left alone (dropping them changes nothing a test should see).
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_TARGETS = [
    "etlstage/protocol",
    "etlstage/kit",
    "etlstage/runtime",
    "etlstage/state",
    "etlstage/conversation",
    "etlstage/spark/tasks/conversation.py",
]

# The fast tests that exercise each module: the first entry whose key starts the path wins.
CORE = "tests/core/"
SUPERVISOR = [
    "runtime/test_flow.py",
    "runtime/test_claims_limits.py",
    "pipeline/test_pipeline.py",
    "runtime/test_misaligned_replies.py",
    "pipeline/test_failures.py",
    "testing/test_harness.py",
    "pipeline/test_crash.py",
    "docs/test_doctests.py",
    "observe/test_claims_metrics.py",
    "runtime/test_claims_survivors.py",
    "runtime/test_hardening_spawn.py",
    "runtime/test_memory_bound.py",
    "runtime/test_confirm.py",
    "runtime/test_worker_exits.py",
    "runtime/test_tap.py",
    "runtime/test_logs_repeats.py",
    "pipeline/test_hardening_pipeline.py",
    "pipeline/test_hardening_bad_input.py",
    "conversation/test_policy.py",
    "conversation/test_parity.py",
    "runtime/test_services.py",  # a stop while services start
]
TESTS: list[tuple[str, list[str]]] = [
    (
        "etlstage/protocol/offsets.py",
        [
            "protocol/test_offsets.py",
            "pipeline/test_pipeline.py",
            "pipeline/test_crash.py",
            "docs/test_doctests.py",
            "runtime/test_claims_limits.py",
        ],
    ),
    (
        "etlstage/protocol/partition.py",
        ["pipeline/test_pipeline.py", "docs/test_doctests.py", "protocol/test_protocol.py"],
    ),
    (
        "etlstage/protocol/",
        [
            "protocol/test_protocol.py",
            "config/test_config.py",  # the stage defaults the protocol's constants give
            "docs/test_doctests.py",
            "testing/test_harness.py",
            "worker/test_sdk.py",
            "runtime/test_misaligned_replies.py",
        ],
    ),
    ("etlstage/kit/services.py", ["runtime/test_services.py"]),
    (
        "etlstage/kit/stats.py",
        [
            "kit/test_stats_reports.py",
            "kit/test_stats_failures.py",  # failures by reason against restarts
            "kit/test_stats_resources.py",  # one measurement a second
            "observe/test_observe_status.py",
            "observe/test_claims_metrics.py",
            "pipeline/test_pipeline.py",
        ],
    ),
    ("etlstage/kit/progress.py", ["kit/test_progress.py", *SUPERVISOR]),
    ("etlstage/kit/transport.py", ["kit/test_transport.py", *SUPERVISOR]),
    ("etlstage/kit/admit.py", ["kit/test_admit.py", *SUPERVISOR]),
    ("etlstage/kit/exits.py", ["kit/test_transport.py", *SUPERVISOR]),
    ("etlstage/kit/stderr.py", ["kit/test_stderr_relay.py", *SUPERVISOR]),
    ("etlstage/kit/", SUPERVISOR),  # what both engines use: the supervisor's tests reach it
    ("etlstage/runtime/runner.py", ["observe/test_instance_metrics.py", *SUPERVISOR]),  # the final metrics
    ("etlstage/runtime/", SUPERVISOR),
    (
        "etlstage/state/",
        [
            "state/test_claims_durability.py",
            "state/test_durable.py",
            "state/test_windows_and_checkpoints.py",
            "state/test_hardening_state.py",
            "state/test_runlock.py",
            "state/test_pipeline_state.py",
            "state/test_schema_atomic.py",
            "observe/test_status_last_run.py",
            "docs/test_doctests.py",
            "runtime/test_claims_limits.py",
            "pipeline/test_pipeline.py",
        ],
    ),
    (
        "etlstage/spark/tasks/conversation.py",
        [
            "spark/test_claims_spark_task.py",
            "spark/test_spark_conversation.py",
            "spark/test_spark_handover.py",
            "spark/test_spark_engine_spool.py",
        ],
    ),
    ("etlstage/spark/setup/cds.py", ["spark/test_spark_cds.py"]),
    (
        "etlstage/conversation/machine.py",  # the state machine both engines drive: both engines' tests
        [
            "conversation/test_machine.py",
            *SUPERVISOR,
            "spark/test_spark_conversation.py",
            "spark/test_claims_spark_task.py",
        ],
    ),
    ("etlstage/conversation/job.py", [*SUPERVISOR, "spark/test_spark_conversation.py"]),
    (
        "etlstage/conversation/confirmation.py",
        ["conversation/test_machine.py", *SUPERVISOR, "spark/test_spark_conversation.py"],
    ),
    (
        "etlstage/conversation/",  # the rules both engines follow: both engines' tests
        [
            "conversation/test_machine.py",
            "conversation/test_policy.py",
            "conversation/test_recovery.py",
            "conversation/test_writeahead.py",
            "conversation/test_handed.py",
            "conversation/test_parity.py",
            "docs/test_doctests.py",
            "pipeline/test_failures.py",
            "runtime/test_misaligned_replies.py",
            "spark/test_spark_conversation.py",
            "testing/test_harness.py",
        ],
    ),
]

FLIP = {
    ast.Lt: ast.GtE,
    ast.GtE: ast.Lt,
    ast.Gt: ast.LtE,
    ast.LtE: ast.Gt,
    ast.Eq: ast.NotEq,
    ast.NotEq: ast.Eq,
    ast.Is: ast.IsNot,
    ast.IsNot: ast.Is,
    ast.In: ast.NotIn,
    ast.NotIn: ast.In,
}
BOUNDARY = {ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE, ast.GtE: ast.Gt}
QUIET_CALLS = {"log", "logger", "logging", "warnings"}  # calls on these are not behaviour


@dataclass
class Mutant:
    path: str
    line: int
    kind: str
    before: str
    after: str
    start: int  # byte offsets of the replaced text in the file
    end: int


KILLED = ("killed", "timeout")  # a hang is a kill: the time limit is set well above a survivor's run


@dataclass
class Outcome:
    mutant: Mutant
    status: str  # killed, survived, timeout, error (pytest could not run the tests: no verdict)
    seconds: float


# --- generating mutants ------------------------------------------------------------------------


def _offsets(source: bytes) -> list[int]:
    starts = [0]
    for i, b in enumerate(source):
        if b == 0x0A:
            starts.append(i + 1)
    return starts


def _span(node: ast.AST, starts: list[int]) -> tuple[int, int]:
    return (
        starts[node.lineno - 1] + node.col_offset,  # type: ignore[attr-defined]
        starts[node.end_lineno - 1] + node.end_col_offset,  # type: ignore[attr-defined]
    )


def _is_docstring(stmt: ast.stmt) -> bool:
    return isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant) and isinstance(stmt.value.value, str)


def _quiet(stmt: ast.stmt) -> bool:
    """A logging call, or an expression statement that is only a string or an ellipsis."""
    if not isinstance(stmt, ast.Expr):
        return False
    call = stmt.value
    if isinstance(call, ast.Constant):
        return True
    if isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute):
        base = call.func.value
        return isinstance(base, ast.Name) and base.id in QUIET_CALLS
    return False


def _stub(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """A method whose whole body is ``raise NotImplementedError`` or ``...`` (a base class's or
    a protocol's placeholder, which subclasses replace)."""
    body = [s for s in fn.body if not _is_docstring(s)]
    if len(body) != 1:
        return not body
    only = body[0]
    if isinstance(only, ast.Raise) and only.exc is not None:
        exc = only.exc.func if isinstance(only.exc, ast.Call) else only.exc
        return isinstance(exc, ast.Name) and exc.id == "NotImplementedError"
    return isinstance(only, ast.Expr) and isinstance(only.value, ast.Constant) and only.value.value is Ellipsis


def _returns_none(stmt: ast.stmt) -> bool:
    """``return`` or ``return None``."""
    return isinstance(stmt, ast.Return) and (
        stmt.value is None or (isinstance(stmt.value, ast.Constant) and stmt.value.value is None)
    )


def _type_checking(node: ast.If) -> bool:
    return "TYPE_CHECKING" in ast.unparse(node.test)


def mutants_of(path: str) -> list[Mutant]:
    source = (ROOT / path).read_bytes()
    tree = ast.parse(source)
    starts = _offsets(source)
    out: list[Mutant] = []
    skip: set[int] = set()
    for node in ast.walk(tree):  # no behaviour to change: imports for type checkers, placeholders, reprs
        if (isinstance(node, ast.If) and _type_checking(node)) or (
            isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and (_stub(node) or node.name == "__repr__")
        ):
            skip.update(id(n) for n in ast.walk(node))

    def add(node: ast.AST, kind: str, after: str) -> None:
        start, end = _span(node, starts)
        before = source[start:end].decode()
        if before != after:
            out.append(Mutant(path, node.lineno, kind, before, after, start, end))  # type: ignore[attr-defined]

    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Compare) and len(node.ops) == 1:
            for kind, table in (("flip", FLIP), ("boundary", BOUNDARY)):
                new_op = table.get(type(node.ops[0]))
                if new_op is not None:
                    add(node, kind, ast.unparse(ast.Compare(node.left, [new_op()], node.comparators)))
        elif isinstance(node, ast.BoolOp):
            other = ast.Or() if isinstance(node.op, ast.And) else ast.And()
            add(node, "and/or", ast.unparse(ast.BoolOp(other, node.values)))
        elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            add(node, "not", ast.unparse(node.operand))
        elif isinstance(node, (ast.BinOp, ast.Compare, ast.Subscript, ast.Slice)):
            for child in ast.iter_child_nodes(node):
                if isinstance(child, ast.Constant) and type(child.value) is int:
                    add(child, "off-by-one", str(child.value + 1))
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name != "__init__":
            body = [s for s in node.body if not _is_docstring(s)]
            if body and not _returns_none(body[0]):  # a return before ``return None`` changes nothing
                first = body[0]
                start, _ = _span(first, starts)
                indent = " " * first.col_offset
                out.append(Mutant(path, first.lineno, "return", "", f"return\n{indent}", start, start))
        for attr in ("body", "orelse", "finalbody"):
            block = getattr(node, attr, None)
            for stmt in block if isinstance(block, list) else []:
                if not isinstance(stmt, ast.stmt) or _is_docstring(stmt) or _quiet(stmt):
                    continue
                if isinstance(stmt, (ast.Expr, ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Raise, ast.Delete)):
                    if isinstance(stmt, ast.AnnAssign) and stmt.value is None:
                        continue
                    if isinstance(node, (ast.Module, ast.ClassDef)):
                        continue  # definitions, not behaviour: dropping them fails at import
                    add(stmt, "drop", "pass")
    out.sort(key=lambda m: (m.path, m.start, m.kind))
    return out


def target_files(targets: list[str]) -> list[str]:
    files: list[str] = []
    for t in targets:
        p = ROOT / t
        found = sorted(p.rglob("*.py")) if p.is_dir() else [p]
        files += [str(f.relative_to(ROOT)) for f in found if f.name != "__init__.py"]
    return files


def tests_for(path: str) -> list[str]:
    for prefix, tests in TESTS:
        if path.startswith(prefix):
            return [CORE + t for t in tests]
    raise SystemExit(f"no tests are known for {path}: add it to TESTS in {__file__}")


# --- running them ------------------------------------------------------------------------------


def copy_checkout(into: Path) -> None:
    """The checkout's files as they are now (tracked and new, not ignored) into ``into``."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        check=True,
        capture_output=True,
    ).stdout
    for name in filter(None, listed.decode().split("\0")):
        src = ROOT / name
        if src.is_file():
            dest = into / name
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest)


def run_tests(copy: Path, tests: list[str], timeout: float, extra: tuple[str, ...] = ()) -> tuple[str, float]:
    """``passed``, ``failed`` or ``timeout`` for the fast tests in the copy."""
    # no bytecode anywhere in a copy: a mutant and the source it replaced may have the same size
    # and second, and a stale .pyc would then run the wrong code (tests/conftest.py obeys this too)
    env = dict(
        os.environ,
        PYTHONPATH=str(copy),
        PYTHONDONTWRITEBYTECODE="1",
        ETLSTAGE_TESTS_NO_BYTECODE="1",
        COVERAGE_FILE=str(copy / COVERAGE),
    )
    argv = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", "-m", "not slow", *extra, *tests]
    started = time.monotonic()
    proc = subprocess.Popen(
        argv, cwd=copy, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
    )
    try:
        code = proc.wait(timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        return "timeout", time.monotonic() - started
    # 0: all passed; 1: a test failed; 2: interrupted (a module failed to import); 3: pytest's
    # internal error (a plugin of the project's failed to load); below 0: pytest died by a
    # signal (a mutant that kills the wrong process, or crashes the interpreter); anything
    # else (a usage error, no test collected) is no verdict on the mutant
    if code < 0:
        return "failed", time.monotonic() - started
    return {0: "passed", 1: "failed", 2: "failed", 3: "failed"}.get(code, "error"), time.monotonic() - started


COVERAGE = ".mutation-coverage"
NEARBY = 2  # lines an earlier report's early-return mutant may have moved by and still be the same
LineTests = dict[str, dict[int, set[str]]]  # file (relative) -> line -> test node ids executing it


def has_coverage() -> bool:
    try:
        import coverage  # noqa: F401
        import pytest_cov  # noqa: F401
    except ImportError:
        return False
    return True


def has_xdist() -> bool:
    try:
        import xdist  # noqa: F401
    except ImportError:
        return False
    return True


def baseline_with_coverage(
    copy: Path, tests: list[str], timeout: float, into: LineTests, more: tuple[str, ...] = ()
) -> tuple[str, float]:
    """The unmutated run of ``tests``, recording into ``into`` which test executes which line."""
    import coverage

    extra = ("--cov=etlstage", "--cov-context=test", "--cov-report=", *more)
    result, seconds = run_tests(copy, tests, timeout, extra)
    data = coverage.CoverageData(basename=str(copy / COVERAGE))
    data.read()
    for measured in data.measured_files():
        name = os.path.relpath(measured, copy)
        lines = into.setdefault(name, {})
        for line, contexts in data.contexts_by_lineno(measured).items():
            # pytest-cov names a context "<node id>|setup", "|run" or "|teardown"
            lines.setdefault(line, set()).update(c.rpartition("|")[0] for c in contexts if "|" in c)
    return result, seconds


Durations = dict[str, float]  # test node id -> its seconds in the baseline run
BASELINE_XML = ".mutation-baseline.xml"
SLACK = 4.0  # a mutant's run may take this many times its tests' baseline time before it is a hang


def read_durations(xml: Path) -> Durations:
    """Each test's seconds in the baseline run, by node id, from pytest's JUnit XML (its
    ``classname`` is the module's dotted path, then any classes)."""
    import xml.etree.ElementTree as ET

    out: Durations = {}
    if not xml.exists():
        return out
    for case in ET.parse(xml).iter("testcase"):
        parts = case.get("classname", "").split(".")
        # the module is up to its last segment named like a test module; classes follow it
        cut = max((i for i, p in enumerate(parts) if p.startswith("test_")), default=len(parts) - 1) + 1
        node = "/".join(parts[:cut]) + ".py::" + "::".join([*parts[cut:], case.get("name", "")])
        out[node] = float(case.get("time", 0) or 0)
    return out


def times_of(tests: list[str], durations: Durations) -> list[float] | None:
    """The baseline times of ``tests`` (node ids, or whole files: each of their tests); None
    when any of them was not timed."""
    out: list[float] = []
    for t in tests:
        if "::" in t:
            if t not in durations:
                return None
            out.append(durations[t])
        else:
            times = [d for node, d in durations.items() if node.startswith(t + "::")]
            if not times:
                return None
            out += times
    return out


def limit_for(tests: list[str], durations: Durations, start: float, ceiling: float) -> float:
    """The time limit of one run of ``tests`` (node ids or whole files): ``start`` (a test
    run's own start-up) and SLACK times what they took in the baseline, within ``ceiling``;
    the ceiling itself when a test's time is not known (a hang then costs the full limit,
    as before). A hang is cut off in seconds where a flat limit waited minutes."""
    times = times_of(tests, durations)
    return ceiling if times is None else min(ceiling, start + SLACK * sum(times))


TEST_FLOOR = 20.0  # no test of a mutant's run is stopped sooner (pytest-timeout)


def per_test_limit(tests: list[str], durations: Durations) -> float | None:
    """Each test's own limit in a run of ``tests``: SLACK times the slowest of them in the
    baseline, at least TEST_FLOOR; None when any was not timed. A hang in one test of a
    long list is stopped by it, not by the whole list's limit. (A test's own timeout mark
    stands: pytest-timeout lets a mark override the command line.)"""
    times = times_of(tests, durations)
    return None if times is None else max(TEST_FLOOR, SLACK * max(times, default=0.0))


def covering(m: Mutant, line_tests: LineTests) -> list[str]:
    """The tests that execute any line the mutant changes, in a stable order."""
    lines = line_tests.get(m.path, {})
    last = m.line + m.before.count("\n")
    return sorted(set().union(*(lines.get(n, set()) for n in range(m.line, last + 1))))


def apply(copy: Path, m: Mutant) -> bytes:
    """Write the mutant into the copy; the original bytes, to put back."""
    target = copy / m.path
    original = target.read_bytes()
    target.write_bytes(original[: m.start] + m.after.encode() + original[m.end :])
    return original


@dataclass
class Limits:
    """How long one run of a mutant's tests may take: by the baseline's times of those tests."""

    ceiling: float  # --timeout, or the default from the whole baseline
    durations: Durations = field(default_factory=dict)
    start: float = 0.0  # a test run's own start-up (the baseline's time outside its tests), doubled

    def of(self, tests: list[str]) -> float:
        return limit_for(tests, self.durations, self.start, self.ceiling) if self.durations else self.ceiling

    def options(self, tests: list[str]) -> tuple[str, ...]:
        """pytest's options for the run: each test's own limit, where the baseline timed them all."""
        each = per_test_limit(tests, self.durations) if self.durations else None
        return () if each is None else (f"--timeout={each:.0f}",)


def evaluate(copy: Path, mutants: list[Mutant], limits: Limits, line_tests: LineTests) -> Iterator[Outcome]:
    for m in mutants:
        original = apply(copy, m)
        try:
            selected = covering(m, line_tests)
            result, seconds = (
                run_tests(copy, selected, limits.of(selected), limits.options(selected))
                if selected
                else ("passed", 0.0)
            )
            if result in ("passed", "error"):  # not killed by the tests that run its lines: the whole list decides
                whole = tests_for(m.path)
                result, more = run_tests(copy, whole, limits.of(whole), limits.options(whole))
                seconds += more
        finally:
            (copy / m.path).write_bytes(original)
        yield Outcome(m, {"passed": "survived", "failed": "killed"}.get(result, result), seconds)


def evaluate_in_parallel(
    copies: list[Path], mutants: list[Mutant], limits: Limits, line_tests: LineTests
) -> Iterator[Outcome]:
    """``evaluate`` with one copy of the checkout per job, each taking the next mutant when it
    is free; outcomes in the order they finish. Each job's copy is its own, so a mutant never
    sees another's change."""
    if len(copies) == 1:
        yield from evaluate(copies[0], mutants, limits, line_tests)
        return
    import queue
    import threading

    todo: queue.Queue[Mutant] = queue.Queue()
    for m in mutants:
        todo.put(m)
    done: queue.Queue[Outcome | BaseException] = queue.Queue()

    def job(copy: Path) -> None:
        try:
            while True:
                try:
                    m = todo.get_nowait()
                except queue.Empty:
                    return
                done.put(next(evaluate(copy, [m], limits, line_tests)))
        except BaseException as exc:  # reported by the caller, not lost in a thread
            done.put(exc)

    threads = [threading.Thread(target=job, args=(c,), daemon=True) for c in copies]
    for t in threads:
        t.start()
    for _ in mutants:
        got = done.get()
        if isinstance(got, BaseException):
            raise got
        yield got


def describe(m: Mutant) -> str:
    before = " ".join(m.before.split())[:70]
    after = " ".join(m.after.split())[:70]
    return f"{m.path}:{m.line} {m.kind}: {before!r} -> {after!r}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("targets", nargs="*", default=DEFAULT_TARGETS, help="files or folders (default: the core)")
    ap.add_argument("--sample", type=int, default=0, help="run a random sample of this many mutants (0: all)")
    ap.add_argument("--seed", type=int, default=1, help="the sample's random seed (the same seed, the same sample)")
    ap.add_argument(
        "--timeout",
        type=float,
        default=0.0,
        help="the most seconds one run of a mutant's tests may take (default: 1.5 times the unmutated run of "
        "every test, at least 300); within it, a run is stopped after 4 times its tests' baseline time and their "
        "start-up: a survivor's run must never reach its limit, or a slow machine counts it killed",
    )
    ap.add_argument(
        "--jobs",
        type=int,
        default=os.cpu_count() or 1,
        help="mutants evaluated at once, each in its own copy of the checkout (default: the number of cores)",
    )
    ap.add_argument(
        "--flat-limit",
        action="store_true",
        help="every run of a mutant's tests gets the whole --timeout (no limit by its tests' baseline times)",
    )
    ap.add_argument("--list", action="store_true", help="list the mutants and stop")
    ap.add_argument("--json", type=Path, help="also write every outcome to this file")
    ap.add_argument(
        "--no-select", action="store_true", help="run each mutant's whole test list (no coverage-based first pass)"
    )
    ap.add_argument(
        "--survivors-of",
        type=Path,
        metavar="JSON",
        help="run again only the survivors an earlier --json report lists (its sample, after new tests)",
    )
    args = ap.parse_args(argv)

    mutants = [m for f in target_files(args.targets) for m in mutants_of(f)]
    earlier: list[dict[str, Any]] = []
    if args.survivors_of:
        earlier = json.loads(args.survivors_of.read_text())
        again = [o["mutant"] for o in earlier if o["status"] in ("survived", "error")]  # error: no verdict yet
        mutants, missing = _same_mutants(again, mutants)
        for m in missing:  # not run again, so not counted killed
            print(f"no longer applies (the code changed), not counted killed: {describe(Mutant(**m))}")
    elif args.sample and args.sample < len(mutants):
        mutants = sorted(random.Random(args.seed).sample(mutants, args.sample), key=lambda m: (m.path, m.start))
    if args.list:
        for each in mutants:
            print(describe(each))
        print(f"{len(mutants)} mutants")
        return 0
    if not mutants:  # nothing to run (every survivor's code changed): no baseline either
        print("no mutant to run")
        return 0

    with tempfile.TemporaryDirectory(prefix="etlstage-mutation-") as tmp:
        copies = [Path(tmp) / f"job{i}" for i in range(max(1, min(args.jobs, len(mutants))))]
        for each in copies:
            each.mkdir()
            copy_checkout(each)
        copy = copies[0]
        # the unmutated code must pass every test a mutant may run, or every mutant looks killed
        every = list(dict.fromkeys(t for m in mutants for t in tests_for(m.path)))
        line_tests: LineTests = {}
        # the baseline on every job's core at once (pytest-xdist; coverage's per-test contexts
        # and the JUnit report are gathered from its processes): it is the run's longest step
        workers = len(copies) if len(copies) > 1 and has_xdist() else 1
        timing = (f"--junitxml={copy / BASELINE_XML}", *(("-n", str(workers)) if workers > 1 else ()))
        if has_coverage() and not args.no_select:
            result, seconds = baseline_with_coverage(copy, every, (args.timeout or 300.0) * 4, line_tests, timing)
        else:
            result, seconds = run_tests(copy, every, (args.timeout or 300.0) * 4, timing)
        print(f"baseline {result} in {seconds:.0f}s: {' '.join(t.removeprefix(CORE) for t in every)}", flush=True)
        if result != "passed":
            return 2
        durations = read_durations(copy / BASELINE_XML)
        # the ceiling as before: 1.5 times every test run one after the other
        limits = Limits(args.timeout or max(300.0, 1.5 * max(seconds, sum(durations.values()))))
        if not args.flat_limit:
            limits.durations = durations
            # a run's own start-up: the baseline's time beyond its tests' share of each process
            limits.start = 10.0 + 2 * max(0.0, seconds - sum(durations.values()) / workers)
        print(
            f"a mutant's test run is stopped after {SLACK:.0f}x its tests' baseline time + {limits.start:.0f}s, "
            f"at most {limits.ceiling:.0f}s, and each test after {SLACK:.0f}x its own, at least {TEST_FLOOR:.0f}s "
            "(then counted killed: a hang)",
            flush=True,
        )
        outcomes = []
        for i, o in enumerate(evaluate_in_parallel(copies, mutants, limits, line_tests), 1):
            outcomes.append(o)
            print(f"[{i}/{len(mutants)}] {o.status:8} {o.seconds:5.1f}s {describe(o.mutant)}", flush=True)

    killed = sum(o.status in KILLED for o in outcomes)
    print(f"\n{killed} of {len(outcomes)} mutants killed ({100 * killed / max(1, len(outcomes)):.0f} %)")
    by_file: dict[str, list[int]] = {}
    for o in outcomes:
        tally = by_file.setdefault(o.mutant.path, [0, 0])
        tally[0] += o.status in KILLED
        tally[1] += 1
    for path, (dead, n) in sorted(by_file.items()):
        print(f"  {path:45} {dead:3}/{n:<3}")
    survivors = [o for o in outcomes if o.status == "survived"]
    if survivors:
        print("survivors (changes no fast test notices):")
        for o in survivors:
            print(f"  {describe(o.mutant)}")
    if earlier:  # a test added since cannot bring a killed mutant back: the earlier kills stand
        total = len(earlier)
        now = killed_with_earlier(earlier, outcomes)
        print(f"with the earlier report's kills: {now} of {total} mutants killed ({100 * now / max(1, total):.0f} %)")
    if args.json:
        args.json.write_text(json.dumps([asdict(o) for o in outcomes], indent=1))
    return 0


def killed_with_earlier(earlier: list[dict[str, Any]], outcomes: list[Outcome]) -> int:
    """A re-run's count: the earlier report's kills stand (a test added since cannot bring a
    killed mutant back), plus the kills among those run again; one not run again (its code
    is gone) is not counted killed."""
    return sum(o["status"] in KILLED for o in earlier) + sum(o.status in KILLED for o in outcomes)


def _same_mutants(wanted: list[dict[str, Any]], mutants: list[Mutant]) -> tuple[list[Mutant], list[dict[str, Any]]]:
    """The mutants now that an earlier report named (the same file and change; of several,
    the one nearest its line, which edits since may have moved), and the ones not found."""
    found: list[Mutant] = []
    missing = []
    for w in wanted:
        same = [
            m for m in mutants if (m.path, m.kind, m.before, m.after) == (w["path"], w["kind"], w["before"], w["after"])
        ]
        if w["kind"] == "return":  # every function's early return reads the same: only one nearby is this one
            same = [m for m in same if abs(m.line - w["line"]) <= NEARBY]
        if same:
            found.append(min(same, key=lambda m: abs(m.line - w["line"])))
        else:
            missing.append(w)
    unique = {id(m): m for m in found}.values()
    return sorted(unique, key=lambda m: (m.path, m.start)), missing


if __name__ == "__main__":
    sys.exit(main())
