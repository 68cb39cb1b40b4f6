"""Read ``stages.yaml``: YAML → JSON Schema → semantic checks → :class:`PipelineConfig`.

Every problem is collected and reported at once, each with its place::

    stages.yaml:14: stages[1].batch_size: -3 is less than the minimum of 1
"""

from __future__ import annotations

import json
import math
import os
import re
import sys
from collections.abc import Iterator, Mapping
from dataclasses import replace
from fractions import Fraction
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from etlstage.config.explain import schema_problems, show, yaml_problem
from etlstage.config.interpolate import load_yaml
from etlstage.config.listen import parse_listen
from etlstage.config.model import (
    EngineConfig,
    OffsetPolicy,
    PipelineConfig,
    RestartPolicy,
    ServiceConfig,
    StageConfig,
    Timeouts,
    split_command,
)
from etlstage.config.yamlshape import MAX_BYTES, check_yaml_shape, too_long
from etlstage.errors import ConfigError, EtlstageError
from etlstage.logs import escape_controls
from etlstage.protocol.markers import Markers
from etlstage.protocol.scenario import Scenario
from etlstage.protocol.vocabulary import MODES, BatchDriver, Mode, Offsets, OnFailure, StageType, default_mode
from etlstage.state.layout import pipeline_dir
from etlstage.state.store import state_dir_problems

Path_ = tuple[str | int, ...]

# The adapter runs on the interpreter that runs etlstage: found with or without its venv on PATH.
KCL_ADAPTER = (sys.executable, "-m", "etlstage_workers.kcl")

_SIZE = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*([kKmMgG]?)(i?)[bB]?\s*$")


@lru_cache(maxsize=1)
def schema() -> dict[str, Any]:
    text = resources.files("etlstage.config").joinpath("stages.schema.json").read_text()
    return json.loads(text)


def parse_size(value: object, where: str = "") -> int:
    """Whole bytes, at least 1, from an integer or ``"64MiB"``, ``"1.5 GB"``, ``"512k"`` (k, M, G; i = binary).

    ``where`` (e.g. the key) starts each error message when given.
    """
    head = f"{where}: " if where else ""
    if isinstance(value, int) and not isinstance(value, bool):
        amount = Fraction(value)
    else:
        m = _SIZE.match(str(value))
        if not m:
            raise ConfigError([f"{head}{value!r} is not a size such as 1048576, 64MiB or 1.5GB"])
        number, unit, binary = m.groups()
        base = 1024 if binary or unit == "k" else 1000
        power = {"": 0, "k": 1, "K": 1, "m": 2, "M": 2, "g": 3, "G": 3}[unit]
        amount = Fraction(number) * base**power
    if amount < 1:
        raise ConfigError([f"{head}{value!r} is less than 1 byte"])
    if amount.denominator != 1:
        raise ConfigError([f"{head}{value!r} is {float(amount):g} bytes, not a whole number of bytes"])
    return int(amount)


def _where(path: Path_) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(top level)"


class _Lines:
    """Line numbers of every node of a YAML document, by JSON path."""

    def __init__(self, text: str) -> None:
        self.lines: dict[Path_, int] = {}
        try:
            root = yaml.compose(text)
        except yaml.YAMLError:
            return
        if root is not None:
            self._walk(root, ())

    def _walk(self, node: yaml.Node, path: Path_) -> None:
        self.lines[path] = node.start_mark.line + 1
        if isinstance(node, yaml.MappingNode):
            for k, v in node.value:
                key = k.value
                self.lines[(*path, key)] = k.start_mark.line + 1
                self._walk(v, (*path, key))
                self.lines[(*path, key)] = k.start_mark.line + 1
        elif isinstance(node, yaml.SequenceNode):
            for i, v in enumerate(node.value):
                self._walk(v, (*path, i))

    def of(self, path: Path_) -> int | None:
        path = tuple(path)
        while path not in self.lines and path:
            path = path[:-1]
        return self.lines.get(path)


def _line_column(text: str, offset: int) -> tuple[int, int]:
    """1-based line and column of ``offset`` in ``text``."""
    return text.count("\n", 0, offset) + 1, offset - (text.rfind("\n", 0, offset) + 1) + 1


def load_config(path: str | Path) -> PipelineConfig:
    """Read, validate and resolve a pipeline file; raises :class:`ConfigError` with every problem."""
    p = Path(path)
    shown = escape_controls(str(p))  # a file name can hold a newline too
    try:
        with p.open("rb") as f:
            raw = f.read(MAX_BYTES + 1)  # not all of /dev/zero
    except FileNotFoundError:
        raise ConfigError([f"no such file: {shown} (give the path of a stages.yaml)"]) from None
    except (OSError, ValueError) as exc:
        raise ConfigError([f"cannot read {shown}: {exc}"]) from None
    if len(raw) > MAX_BYTES:
        raise too_long(shown)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line, column = _line_column(raw.decode("latin-1"), exc.start)  # one character a byte: columns in bytes
        raise ConfigError(
            [f"{shown}:{line}:{column}: byte 0x{raw[exc.start]:02x} is not UTF-8 text; save the file as UTF-8"]
        ) from None
    return parse_config(text, shown, base_dir=str(p.resolve().parent))


class _Loader(yaml.SafeLoader):
    """YAML's safe loader, dates and times left as the text they were written as: a
    ``name: 2026-02-30`` is a name, not an invalid date, and ``start: 2026-01-01T00:00:00Z``
    means the same quoted or not (parsed where an instant is expected, with its place).
    A value an explicit tag cannot make (``!!int abc``) is a YAML error at its place."""

    def construct_object(self, node: yaml.Node, deep: bool = False) -> Any:
        try:
            return super().construct_object(node, deep)
        except (ValueError, KeyError, TypeError, OverflowError) as exc:
            raise yaml.constructor.ConstructorError(
                None,
                None,
                f"{node.tag.rpartition(':')[2]} {escape_controls(str(node.value))[:80]!r}: {exc}",
                node.start_mark,
            ) from None


def _as_text(loader: _Loader, node: yaml.Node) -> str:
    if not isinstance(node, yaml.ScalarNode):
        raise yaml.constructor.ConstructorError(None, None, "!!timestamp on a collection", node.start_mark)
    return str(loader.construct_scalar(node))


_Loader.add_constructor("tag:yaml.org,2002:timestamp", _as_text)


def parse_config(
    text: str, source: str = "stages.yaml", base_dir: str = ".", environ: Mapping[str, str] | None = None
) -> PipelineConfig:
    """``environ`` (default: this process's environment) fills ``${VAR}`` in values."""
    try:
        check_yaml_shape(text, source)
        data = load_yaml(text, source, os.environ if environ is None else environ, _Loader)
    except yaml.reader.ReaderError as exc:  # a character YAML does not allow: placed by line, not offset
        line, column = _line_column(text, exc.position)
        raise ConfigError(
            [f"{source}:{line}:{column}: not valid YAML: character {_char(exc.character)} is not allowed in YAML text"]
        ) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{source}:{mark.line + 1}:{mark.column + 1}" if mark else source
        raise ConfigError([f"{where}: not valid YAML: {yaml_problem(exc)}"]) from None
    lines = _Lines(text)

    def at(path: Path_, message: str) -> str:
        line = lines.of(path)
        return f"{source}:{line}: {_where(path)}: {message}" if line else f"{source}: {_where(path)}: {message}"

    if not isinstance(data, dict):
        raise ConfigError([f"{source}: expected a mapping with a 'stages' list, got {type(data).__name__}"])
    validator = jsonschema.Draft202012Validator(schema())
    problems = [p for e in validator.iter_errors(data) for p in schema_problems(e)]
    problems += [(path, f"{show(value)} is not a finite number") for path, value in _non_finite(data, ())]
    if problems:
        raise ConfigError([at(path, msg) for path, msg in sorted(problems, key=lambda p: tuple(map(str, p[0])))])
    return _resolve(data, at, source, base_dir)


def _non_finite(value: object, path: Path_) -> Iterator[tuple[Path_, float]]:
    """Every ``.inf`` / ``.nan`` in the document: no setting means anything with them."""
    if isinstance(value, float) and not math.isfinite(value):
        yield path, value
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from _non_finite(v, (*path, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _non_finite(v, (*path, i))


def _char(c: str | int) -> str:
    return f"U+{c if isinstance(c, int) else ord(c):04X}"


def _name(name: str) -> str:
    """Names are printed in logs and progress lines: no control characters (a newline would forge a log line)."""
    if escape_controls(name) != name:
        raise ConfigError([f"{name!r} holds control characters; a name is printed in logs"])
    return name


def _no_nul(value: str) -> str:
    if "\x00" in value:
        raise ConfigError([f"{value!r} holds a NUL byte, which no path, argument or variable can carry"])
    return value


def _command(command: str | list[str]) -> list[str]:
    try:
        argv = split_command(command)
    except ValueError as exc:  # shlex: an unclosed quote, a trailing backslash
        raise ConfigError(
            [f"{command!r} cannot be split into arguments: {exc}; close the quote, or give an argv list"]
        ) from None
    for arg in argv:
        _no_nul(arg)
    return argv


def _env(env: dict[object, object]) -> dict[str, str]:
    out = {}
    for key, v in env.items():
        k = str(key)
        if not k or "=" in k or "\x00" in k:
            raise ConfigError([f"{k!r} is not an environment variable name (not empty, no '=' or NUL)"])
        out[k] = _no_nul(str(v))
    return out


def _resolve(data: dict[str, Any], at: Any, source: str, base_dir: str) -> PipelineConfig:
    problems: list[str] = []

    def guard(path: Path_, fn: Any, *args: Any) -> Any:
        try:
            return fn(*args)
        except EtlstageError as exc:
            msgs = exc.problems if isinstance(exc, ConfigError) else [str(exc)]
            problems.extend(at(path, m) for m in msgs)
            return None

    markers = guard(("markers",), Markers.from_mapping, data.get("markers") or {}) or Markers()
    defaults = data.get("defaults") or {}
    stages: list[StageConfig] = []
    names: set[str] = set()
    for i, raw in enumerate(data["stages"]):
        raw = {**defaults, **raw}
        path: Path_ = ("stages", i)
        name, typ = raw["name"], raw["type"]
        guard((*path, "name"), _name, name)
        if name in names:
            problems.append(at((*path, "name"), f"stage name {name!r} is used twice; names must be unique"))
        names.add(name)
        mode = raw.get("mode") or default_mode(typ)
        if mode not in MODES[typ]:
            problems.append(
                at((*path, "mode"), f"{mode!r} is not a mode of a {typ}-stage; expected one of {', '.join(MODES[typ])}")
            )
        merged = {**(data.get("markers") or {}), **(raw.get("markers") or {})}
        stage_markers = guard((*path, "markers"), Markers.from_mapping, merged) or markers
        offsets = raw.get("offsets", StageConfig.offsets)
        policy = None
        if "offset_policy" in raw:
            op = raw["offset_policy"]
            policy = OffsetPolicy(op["type"], op.get("start", 0), op.get("step", 1000), op.get("lag"))
        if typ == StageType.E and mode == Mode.CYCLIC and offsets == Offsets.SUPERVISOR:
            if policy is None:
                problems.append(
                    at(path, "offsets: supervisor needs an offset_policy (e.g. {type: counter, start: 0, step: 1000})")
                )
            else:
                from etlstage.protocol.offsets import make_policy

                guard(
                    (*path, "offset_policy"),
                    make_policy,
                    policy.kind,
                    policy.start,
                    policy.step,
                    policy.lag,
                    "offset_policy",
                )
            # instances > 1 is for the Spark engine: checked with the engine, after the flags
        elif policy is not None and not (typ == StageType.E and mode == Mode.CYCLIC):
            problems.append(at((*path, "offset_policy"), "only a cyclic E-stage with offsets: supervisor uses it"))
        if raw.get("partition_by") is not None and typ == StageType.E:
            problems.append(at((*path, "partition_by"), "an E-stage has no input to partition"))
        if isinstance(raw.get("native"), str) and typ == StageType.T:
            problems.append(at((*path, "native"), "only E- and L-stages have native Spark implementations"))
        protocol = raw.get("protocol", "marker")
        if protocol == "kcl-multilang" and typ == StageType.E:
            problems.append(at((*path, "protocol"), "kcl-multilang is for T- and L-stages"))
        command = guard((*path, "command"), _command, raw["command"]) or []
        if protocol == "kcl-multilang":
            command = [
                *KCL_ADAPTER,
                "--protocol-version",
                str(raw.get("protocol_version", 2)),
                "--",
                *command,
            ]
        cwd = guard((*path, "cwd"), _no_nul, raw["cwd"]) if raw.get("cwd") else None
        t = raw.get("timeouts") or {}
        r = raw.get("restart") or {}
        sizes = ("max_message_bytes", "max_rss", "batch_bytes", "replay_bytes")
        size_fields = {k: guard((*path, k), parse_size, raw[k]) for k in sizes if k in raw}
        try:
            stage = StageConfig(
                name=name,
                type=StageType(typ),
                command=command,
                mode=Mode(mode),
                markers=stage_markers,
                batch_size=raw.get("batch_size", StageConfig.batch_size if mode == Mode.BATCH else 1),
                batch_driver=BatchDriver(raw.get("batch_driver", StageConfig.batch_driver)),
                batch_bytes=size_fields.get("batch_bytes") or StageConfig.batch_bytes,
                replay_bytes=size_fields.get("replay_bytes") or StageConfig.replay_bytes,
                linger=float(raw.get("linger", StageConfig.linger)),
                offsets=Offsets(offsets),
                offset_policy=policy,
                poll_interval=float(raw.get("poll_interval", StageConfig.poll_interval)),
                instances=raw.get("instances", StageConfig.instances),
                partition_by=raw.get("partition_by"),
                native=raw.get("native", StageConfig.native),
                env=guard((*path, "env"), _env, raw.get("env") or {}) or {},
                cwd=str(Path(base_dir) / cwd) if cwd else None,
                timeouts=replace(Timeouts(), **{k: t[k] for k in ("startup", "request", "idle") if k in t}),
                restart=replace(
                    RestartPolicy(), **{k: r[k] for k in ("max_restarts", "backoff", "backoff_max") if k in r}
                ),
                on_failure=OnFailure(raw.get("on_failure", StageConfig.on_failure)),
                max_message_bytes=size_fields.get("max_message_bytes") or StageConfig.max_message_bytes,
                prefetch=raw.get("prefetch", StageConfig.prefetch),
                stop_timeout=float(raw.get("stop_timeout", StageConfig.stop_timeout)),
                max_rss=size_fields.get("max_rss"),
            )
        except (TypeError, ValueError) as exc:
            problems.append(at(path, str(exc)))
            continue
        guard(
            (*path, "command"),
            Scenario(
                type=typ, mode=mode if mode in MODES[typ] else MODES[typ][0], markers=stage_markers, stage=name
            ).expand,
            command,
        )
        stages.append(stage)

    types = [s.type for s in stages]
    order = "".join(types)
    if stages and not re.fullmatch(r"E+T*L+", order):
        problems.append(
            at(
                ("stages",),
                f"stages must be one or more E, then any T, then one or more L, in that order; got {' → '.join(types)}",
            )
        )
    http = guard(("http",), parse_listen, data["http"], "") if data.get("http") is not None else None
    name = guard(("name",), _name, data["name"]) if "name" in data else escape_controls(Path(source).stem)
    root = Path(data.get("state_dir", ".etlstage"))
    if not root.is_absolute():
        root = Path(base_dir) / root
    state_dir = pipeline_dir(root, name or "pipeline")  # each pipeline's state in a folder of its own
    for problem in state_dir_problems(root) or (state_dir_problems(state_dir) if root.is_dir() else []):
        problems.append(at(("state_dir",), problem) if "state_dir" in data else f"{source}: state_dir: {problem}")
    buffer_bytes = guard(("buffer_bytes",), parse_size, data.get("buffer_bytes", 16 << 20))
    services = []
    for j, sv in enumerate(data.get("services") or []):
        where: Path_ = ("services", j)
        guard((*where, "name"), _name, sv["name"])
        command = guard((*where, "command"), _command, sv["command"])
        env = guard((*where, "env"), _env, sv.get("env") or {})
        if sv.get("creates") is not None:
            guard((*where, "creates"), _no_nul, sv["creates"])
        services.append(
            ServiceConfig(
                name=sv["name"],
                command=command or [],
                ready=sv.get("ready", "line"),
                timeout=float(sv.get("timeout", 120)),
                enabled=sv.get("enabled", True),
                creates=sv.get("creates"),
                env=env or {},
            )
        )
    if problems:
        raise ConfigError(problems)
    return PipelineConfig(
        services=services,
        stages=stages,
        state_dir=str(state_dir),
        markers=markers,
        source=source,
        base_dir=base_dir,
        name=name,
        max_inflight_windows=data.get("max_inflight_windows", 4),
        buffer_bytes=buffer_bytes,
        drain_timeout=float(data.get("drain_timeout", 30.0)),
        http=http,
        engine=_engine(data.get("engine") or {}, base_dir, str(state_dir)),
    )


def _engine(raw: dict[str, Any], base_dir: str, state_dir: str) -> EngineConfig:
    """The ``engine:`` block (already checked by the schema), paths resolved."""
    checkpoint: Path | str = Path(raw.get("checkpoint") or Path(state_dir) / "spark-checkpoint")
    if "://" in str(raw.get("checkpoint") or ""):  # a Hadoop URI (s3a://, hdfs://, abfss://...): as given
        checkpoint = str(raw["checkpoint"])
    elif not Path(checkpoint).is_absolute():
        checkpoint = Path(base_dir) / checkpoint
    conf = {k: (str(v).lower() if isinstance(v, bool) else str(v)) for k, v in (raw.get("conf") or {}).items()}
    return EngineConfig(
        kind=raw.get("kind", "supervisor"),
        master=raw.get("master", "local[*]"),
        conf=conf,
        checkpoint=str(checkpoint),
        trigger=float(raw.get("trigger", 0.0)),
        native=bool(raw.get("native", EngineConfig.native)),
        ship=[str(Path(base_dir) / p) for p in raw.get("ship") or []],  # absolute paths stay as they are
    )
