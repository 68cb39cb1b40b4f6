"""Pipeline-level fixture tests: a whole stages.yaml run from input files to expected outputs.

A small YAML test file (docs/testing.md) names a pipeline and its cases.  Each case runs
the pipeline for real — ``etlstage run --once`` in a process of its own, the workers as
processes — in a fresh copy of the pipeline's folder, so relative paths in commands and
files mean what they mean in place, and neither the folder nor its state is touched.  The
case's input files are written into the copy first; after the run, its exit status, the
files it wrote and its log are compared with what the case expects.

``etlstage test FILE`` runs them from the command line; :func:`load_tests` and
:meth:`PipelineCase.run` (or the pytest fixture ``pipeline_test``) from a test suite.
"""

from __future__ import annotations

import collections
import difflib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field, replace
from pathlib import Path, PurePosixPath
from typing import Any

import jsonschema
import yaml

from etlstage.config.explain import schema_problems, yaml_problem
from etlstage.config.loader import BACKOFF_MAX_VAR, _Lines, _where, parse_config
from etlstage.errors import ConfigError
from etlstage.kit.exits import kill_everything
from etlstage.logs import escape_controls

DEFAULT_TIMEOUT = 120.0  # seconds a case's run may take
# A case's folder holds what the pipeline runs with: its files, worker programs and their
# dependencies.  Never copied: state of earlier runs, version control, caches — nor the files
# the cases expect (outputs of real runs there would be appended to or passed off as the
# run's own).  Dependency folders are linked, not copied: big, and npm's links inside
# node_modules are relative to where it stands.
SKIPPED = (".etlstage", ".git", "__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache")
LINKED = ("node_modules", ".venv", "venv")
# restarts happen as the stages allow, but a case does not wait out their backoff
TEST_BACKOFF_MAX = "0.1"
STDERR_TAIL = 30  # lines of a failed run's log shown

_TEXT = {"type": "string"}
_FILES = {"type": "object", "propertyNames": {"minLength": 1}, "additionalProperties": _TEXT}
SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["cases"],
    "additionalProperties": False,
    "properties": {
        "pipeline": {"type": "string", "minLength": 1},
        "engine": {"enum": ["supervisor", "spark"]},
        "timeout": {"type": "number", "exclusiveMinimum": 0},
        "cases": {
            "type": "array",
            "minItems": 1,
            "items": {
                "type": "object",
                "required": ["name"],
                "additionalProperties": False,
                "properties": {
                    "name": {"type": "string", "minLength": 1},
                    "env": {"type": "object", "additionalProperties": _TEXT},
                    "files": _FILES,
                    "timeout": {"type": "number", "exclusiveMinimum": 0},
                    "expect": {
                        "type": "object",
                        "additionalProperties": False,
                        "properties": {
                            "exit_status": {"type": "integer", "minimum": 0},
                            "files": {
                                "type": "object",
                                "propertyNames": {"minLength": 1},
                                "additionalProperties": {
                                    "oneOf": [
                                        _TEXT,
                                        {
                                            "type": "object",
                                            "required": ["lines"],
                                            "additionalProperties": False,
                                            "properties": {
                                                "lines": {"type": "array", "items": _TEXT},
                                                "ordered": {"type": "boolean"},
                                            },
                                        },
                                    ]
                                },
                            },
                            "stderr_contains": {"type": "array", "items": _TEXT},
                        },
                    },
                },
            },
        },
    },
}


@dataclass(frozen=True)
class Expected:
    """What a written file must hold: exactly ``text``, or these ``lines`` (in any order
    unless ``ordered``: instances of a stage may load in any order)."""

    text: str | None = None
    lines: tuple[str, ...] = ()
    ordered: bool = True

    def problems(self, path: str, written: str | None) -> list[str]:
        if written is None:
            return [f"{path}: not written"]
        if self.text is not None:
            if written == self.text:
                return []
            diff = difflib.unified_diff(
                self.text.splitlines(keepends=True),
                written.splitlines(keepends=True),
                "expected",
                "written",
            )
            shown = [line.rstrip("\n") for line in diff][:40]
            return [f"{path} differs:", *(f"  {escape_controls(line)}" for line in shown)]
        got = written.splitlines()
        if self.ordered:
            return Expected("".join(f"{line}\n" for line in self.lines)).problems(path, "".join(f"{g}\n" for g in got))
        missing = collections.Counter(self.lines) - collections.Counter(got)
        extra = collections.Counter(got) - collections.Counter(self.lines)
        out = []
        if missing:
            out.append(f"{path}: {sum(missing.values())} line(s) missing, e.g. {_sample(missing)}")
        if extra:
            out.append(f"{path}: {sum(extra.values())} line(s) not expected, e.g. {_sample(extra)}")
        return out


def _sample(lines: collections.Counter[str]) -> str:
    return ", ".join(repr(escape_controls(line)) for line in list(lines)[:3])


@dataclass
class CaseResult:
    name: str
    seconds: float
    exit_status: int | None  # None: killed at its timeout
    problems: list[str]
    stderr: str
    folder: Path

    @property
    def passed(self) -> bool:
        return not self.problems

    def report(self) -> str:
        """The problems and the end of the run's log, as ``etlstage test`` prints them."""
        tail = self.stderr.splitlines()[-STDERR_TAIL:]
        lines = [*self.problems, f"the run's log (last {len(tail)} lines):", *(f"  | {t}" for t in tail)]
        return "\n".join(lines)

    def check(self) -> None:
        """Raise AssertionError with :meth:`report` unless the case passed (for pytest)."""
        if self.problems:
            raise AssertionError(f"pipeline test {self.name!r} failed:\n{self.report()}")


@dataclass
class PipelineCase:
    """One case of a test file: its input files, environment and expectations."""

    name: str
    pipeline: Path  # the stages.yaml under test (its folder is copied for each run)
    engine: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    files: dict[str, str] = field(default_factory=dict)
    expect_files: dict[str, Expected] = field(default_factory=dict)
    exit_status: int = 0
    stderr_contains: list[str] = field(default_factory=list)
    timeout: float = DEFAULT_TIMEOUT
    outputs: frozenset[str] = frozenset()  # files any case of the test file expects: never copied

    def run(self, workdir: str | Path) -> CaseResult:
        """Run the case in a new folder under ``workdir`` (left there for inspection)."""
        folder = Path(tempfile.mkdtemp(prefix="case-", dir=workdir))
        copy = folder / self.pipeline.parent.name
        env = {BACKOFF_MAX_VAR: TEST_BACKOFF_MAX, **os.environ, **self.env}
        copy_folder(self.pipeline.parent, copy, self.outputs | _state_dir(self.pipeline, env))
        for rel, text in self.files.items():
            target = copy / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text)
        problems = _outside_state(copy / self.pipeline.name, env)
        if problems:
            return CaseResult(self.name, 0.0, None, problems, "", folder)
        argv = [sys.executable, "-m", "etlstage.cli", "run", "--once", "--no-progress", self.pipeline.name]
        if self.engine:
            argv += ["--engine", self.engine]
        started = time.monotonic()
        code, stderr = _run(argv, copy, env, self.timeout)
        seconds = time.monotonic() - started
        problems = []
        if code is None:
            problems.append(f"the run did not end within {self.timeout:g}s: stopped")
        elif code != self.exit_status:
            problems.append(f"the run ended with exit status {code}, expected {self.exit_status}")
        for rel, expected in self.expect_files.items():
            path = copy / rel
            written = path.read_text(errors="replace") if path.is_file() else None
            problems += expected.problems(rel, written)
        problems += [f"the run's log does not say {s!r}" for s in self.stderr_contains if s not in stderr]
        return CaseResult(self.name, seconds, code, problems, stderr, folder)


def copy_folder(source: Path, target: Path, outputs: frozenset[str]) -> None:
    """``source`` into ``target`` as a case runs in it: without :data:`SKIPPED` and the
    ``outputs`` (paths relative to ``source``), with :data:`LINKED` folders linked."""
    root = source.resolve()
    links: list[Path] = []

    def ignore(where: str, names: list[str]) -> set[str]:
        rel = Path(where).resolve().relative_to(root)
        links.extend(rel / n for n in names if n in LINKED and (root / rel / n).is_dir())
        return {n for n in names if n in SKIPPED or n in LINKED or (rel / n).as_posix() in outputs}

    shutil.copytree(source, target, symlinks=True, ignore=ignore)
    for rel in links:
        (target / rel).symlink_to(root / rel, target_is_directory=True)


def _state_dir(pipeline_file: Path, env: dict[str, str]) -> frozenset[str]:
    """The pipeline's state folder, relative to its folder, when it is inside it."""
    try:
        config = parse_config(pipeline_file.read_text(), str(pipeline_file), str(pipeline_file.parent), environ=env)
    except (ConfigError, OSError, UnicodeDecodeError):
        return frozenset()
    state = Path(config.state_dir).resolve()
    root = pipeline_file.parent.resolve()
    return (
        frozenset({state.relative_to(root).as_posix()}) if state.is_relative_to(root) and state != root else frozenset()
    )


def _outside_state(pipeline_file: Path, env: dict[str, str]) -> list[str]:
    """A pipeline whose state_dir is outside its folder would share state between cases
    (and with real runs): refused.  A file that does not load is left to the run to report."""
    try:
        config = parse_config(pipeline_file.read_text(), str(pipeline_file), str(pipeline_file.parent), environ=env)
    except (ConfigError, OSError, UnicodeDecodeError):
        return []
    state = Path(config.state_dir).resolve()
    if not state.is_relative_to(pipeline_file.parent.resolve()):
        return [
            f"{pipeline_file.name}: state_dir {config.state_dir} is outside the pipeline's folder: a test run "
            "would share its state with other runs; use a relative state_dir (the default .etlstage)"
        ]
    return []


def _run(argv: list[str], cwd: Path, env: dict[str, str], timeout: float) -> tuple[int | None, str]:
    """The run's exit status (None: stopped at its timeout) and its log."""
    with subprocess.Popen(
        argv,
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    ) as proc:
        try:
            out, _ = proc.communicate(timeout=timeout)
            return proc.returncode, out.decode(errors="replace")
        except subprocess.TimeoutExpired:
            kill_everything(proc.pid)  # the run, every worker it started and theirs (own sessions)
            out, _ = proc.communicate()
            return None, out.decode(errors="replace")


def load_tests(path: str | Path) -> list[PipelineCase]:
    """The cases of a test file; :class:`ConfigError` (naming the file, line and key) when it is wrong."""
    p = Path(path)
    shown = escape_controls(str(p))
    try:
        text = p.read_text()
    except FileNotFoundError:
        raise ConfigError([f"no such test file: {shown}"]) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError([f"cannot read {shown}: {exc}"]) from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{shown}:{mark.line + 1}:{mark.column + 1}" if mark else shown
        raise ConfigError([f"{where}: not valid YAML: {yaml_problem(exc)}"]) from None
    lines = _Lines(text)

    def at(where: tuple[str | int, ...], message: str) -> str:
        line = lines.of(where)
        return f"{shown}:{line}: {_where(where)}: {message}" if line else f"{shown}: {_where(where)}: {message}"

    if not isinstance(data, dict):
        raise ConfigError([f"{shown}: expected a mapping with a 'cases' list"])
    validator = jsonschema.Draft202012Validator(SCHEMA)
    problems = [at(w, m) for e in validator.iter_errors(data) for w, m in schema_problems(e)]
    if problems:
        raise ConfigError(problems)
    pipeline = (p.parent / data.get("pipeline", "stages.yaml")).resolve()
    if not pipeline.is_file():
        raise ConfigError([at(("pipeline",), f"no such pipeline file: {escape_controls(str(pipeline))}")])
    names = collections.Counter(c["name"] for c in data["cases"])
    cases = []
    for i, c in enumerate(data["cases"]):
        if names[c["name"]] > 1:
            problems.append(at(("cases", i, "name"), f"{c['name']!r} names two cases"))
        expect = c.get("expect") or {}
        for key, rel in [
            *((("files", r), r) for r in c.get("files", {})),
            *((("expect", "files", r), r) for r in expect.get("files", {})),
        ]:
            if PurePosixPath(rel).is_absolute() or ".." in PurePosixPath(rel).parts:
                problems.append(at(("cases", i, *key), "a path inside the pipeline's folder, relative, without .."))
        cases.append(
            PipelineCase(
                name=c["name"],
                pipeline=pipeline,
                engine=data.get("engine"),
                env=dict(c.get("env", {})),
                files=dict(c.get("files", {})),
                expect_files={rel: _expected(v) for rel, v in expect.get("files", {}).items()},
                exit_status=int(expect.get("exit_status", 0)),
                stderr_contains=list(expect.get("stderr_contains", [])),
                timeout=float(c.get("timeout", data.get("timeout", DEFAULT_TIMEOUT))),
            )
        )
    if problems:
        raise ConfigError(problems)
    outputs = frozenset(PurePosixPath(rel).as_posix() for c in cases for rel in c.expect_files)
    return [replace(c, outputs=outputs) for c in cases]


def check_cases(test_file: str | Path, case: str | None = None, *, workdir: str | Path) -> list[CaseResult]:
    """Run a test file's cases (or the one named ``case``) under ``workdir``; AssertionError
    with the report of the first that fails.  What the ``pipeline_test`` fixture calls."""
    cases = [c for c in load_tests(test_file) if case in (None, c.name)]
    if not cases:
        raise AssertionError(f"{test_file}: no case named {case!r}")
    results = []
    for c in cases:
        results.append(c.run(workdir))
        results[-1].check()
    return results


def _expected(value: str | dict[str, Any]) -> Expected:
    if isinstance(value, str):
        return Expected(text=value)
    return Expected(lines=tuple(value["lines"]), ordered=bool(value.get("ordered", True)))


__all__ = ["CaseResult", "Expected", "PipelineCase", "check_cases", "load_tests"]
