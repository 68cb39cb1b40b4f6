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

import yaml

from etlstage.config import verdicts
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
from etlstage.protocol import batchheader
from etlstage.protocol.markers import MARKER_NAMES, Markers
from etlstage.protocol.scenario import Scenario
from etlstage.protocol.vocabulary import MODES, BatchDriver, Mode, Offsets, OnFailure, StageType, default_mode
from etlstage.redact import redact_text
from etlstage.state.layout import pipeline_dir
from etlstage.state.store import state_dir_problems

Path_ = tuple[str | int, ...]

# The adapter runs on the interpreter that runs etlstage: found with or without its venv on PATH.
KCL_ADAPTER = (sys.executable, "-m", "etlstage_workers.kcl")

_SIZE = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*([kKmMgG]?)(i?)[bB]?\s*$")


@lru_cache(maxsize=1)
def schema_text() -> str:
    return resources.files("etlstage.config").joinpath("stages.schema.json").read_text()


@lru_cache(maxsize=1)
def schema() -> dict[str, Any]:
    return json.loads(schema_text())


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
    problems = _schema_problems(data)
    problems += [(path, f"{show(value)} is not a finite number") for path, value in _non_finite(data, ())]
    if problems:
        raise ConfigError([at(path, msg) for path, msg in sorted(problems, key=lambda p: tuple(map(str, p[0])))])
    return _capped_backoff(_resolve(data, at, source, base_dir), os.environ if environ is None else environ)


def _schema_problems(data: dict[str, Any]) -> list[tuple[Path_, str]]:
    """What the JSON Schema finds wrong with ``data``; a document found valid before is
    not checked again (:mod:`etlstage.config.verdicts`: jsonschema is not even imported)."""
    key = verdicts.digest(schema_text(), data)
    if verdicts.known_valid(key):
        return []
    import jsonschema  # ~70 ms: only when there is something to check

    validator = jsonschema.Draft202012Validator(schema())
    problems = [p for e in validator.iter_errors(data) for p in schema_problems(e)]
    if not problems:
        verdicts.remember(key)
    return problems


BACKOFF_MAX_VAR = "ETLSTAGE_RESTART_BACKOFF_MAX"


def _capped_backoff(config: PipelineConfig, environ: Mapping[str, str]) -> PipelineConfig:
    """With ``ETLSTAGE_RESTART_BACKOFF_MAX`` set (``etlstage test`` sets it), no restart waits
    longer than that: a fixture case meets every restart its stages allow without waiting
    them out.  Both engines read the restart policy from here."""
    cap = environ.get(BACKOFF_MAX_VAR)
    if not cap:
        return config
    try:
        seconds = float(cap)
        if not math.isfinite(seconds) or seconds < 0:
            raise ValueError
    except ValueError:
        raise ConfigError([f"{BACKOFF_MAX_VAR}={cap!r}: expected seconds, a number ≥ 0"]) from None

    def capped(r: RestartPolicy) -> RestartPolicy:
        return replace(r, backoff=min(r.backoff, seconds), backoff_max=min(r.backoff_max, seconds))

    return replace(config, stages=[replace(s, restart=capped(s.restart)) for s in config.stages])


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
            [
                f"{redact_text(str(command))!r} cannot be split into arguments: {exc}; close the quote, "
                "or give an argv list"
            ]
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


class _Problems:
    """Every problem found in the file, each told at its place (``at``)."""

    def __init__(self, at: Any) -> None:
        self.at = at
        self.found: list[str] = []

    def add(self, path: Path_, message: str) -> None:
        self.found.append(self.at(path, message))

    def guard(self, path: Path_, fn: Any, *args: Any) -> Any:
        """``fn(*args)``; None, the problem noted at ``path``, when it raises an etlstage error."""
        try:
            return fn(*args)
        except EtlstageError as exc:
            msgs = exc.problems if isinstance(exc, ConfigError) else [str(exc)]
            self.found.extend(self.at(path, m) for m in msgs)
            return None


def _resolve(data: dict[str, Any], at: Any, source: str, base_dir: str) -> PipelineConfig:
    problems = _Problems(at)
    markers = problems.guard(("markers",), Markers.from_mapping, data.get("markers") or {}) or Markers()
    stages = _stages(data, markers, base_dir, problems)
    _check_order(stages, problems)
    http = problems.guard(("http",), parse_listen, data["http"], "") if data.get("http") is not None else None
    name = problems.guard(("name",), _name, data["name"]) if "name" in data else escape_controls(Path(source).stem)
    state_dir = _state_dir(data, name or "pipeline", source, base_dir, problems)
    buffer_bytes = problems.guard(("buffer_bytes",), parse_size, data.get("buffer_bytes", 16 << 20))
    services = _services(data, problems)
    if problems.found:
        raise ConfigError(problems.found)
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


def _stages(data: dict[str, Any], markers: Markers, base_dir: str, problems: _Problems) -> list[StageConfig]:
    """Each stage with the file's ``defaults`` under it; names unique."""
    defaults = data.get("defaults") or {}
    stages: list[StageConfig] = []
    names: set[str] = set()
    for i, raw in enumerate(data["stages"]):
        raw = {**defaults, **raw}
        path: Path_ = ("stages", i)
        name = raw["name"]
        problems.guard((*path, "name"), _name, name)
        if name in names:
            problems.add((*path, "name"), f"stage name {name!r} is used twice; names must be unique")
        names.add(name)
        stage = _stage(raw, path, data.get("markers") or {}, markers, base_dir, problems)
        if stage is not None:
            stages.append(stage)
    return stages


def _stage(
    raw: dict[str, Any], path: Path_, top_markers: dict[str, Any], markers: Markers, base_dir: str, problems: _Problems
) -> StageConfig | None:
    """One stage's StageConfig (None when it cannot be built: the problems say why)."""
    name, typ = raw["name"], raw["type"]
    mode = raw.get("mode") or default_mode(typ)
    if mode not in MODES[typ]:
        problems.add(
            (*path, "mode"), f"{mode!r} is not a mode of a {typ}-stage; expected one of {', '.join(MODES[typ])}"
        )
    merged = {**top_markers, **(raw.get("markers") or {})}
    stage_markers = problems.guard((*path, "markers"), Markers.from_mapping, merged) or markers
    policy = _offset_policy(raw, typ, mode, path, problems)
    _check_stage_keys(raw, typ, path, problems)
    command = _stage_command(raw, path, problems)
    cwd = problems.guard((*path, "cwd"), _no_nul, raw["cwd"]) if raw.get("cwd") else None
    t = raw.get("timeouts") or {}
    r = raw.get("restart") or {}
    sizes = ("max_message_bytes", "max_rss", "batch_bytes", "replay_bytes")
    size_fields = {k: problems.guard((*path, k), parse_size, raw[k]) for k in sizes if k in raw}
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
            offsets=Offsets(raw.get("offsets", StageConfig.offsets)),
            offset_policy=policy,
            poll_interval=float(raw.get("poll_interval", StageConfig.poll_interval)),
            instances=raw.get("instances", StageConfig.instances),
            partition_by=raw.get("partition_by"),
            native=raw.get("native", StageConfig.native),
            env=problems.guard((*path, "env"), _env, raw.get("env") or {}) or {},
            cwd=str(Path(base_dir) / cwd) if cwd else None,
            timeouts=replace(Timeouts(), **{k: t[k] for k in ("startup", "request", "idle") if k in t}),
            restart=replace(RestartPolicy(), **{k: r[k] for k in ("max_restarts", "backoff", "backoff_max") if k in r}),
            on_failure=OnFailure(raw.get("on_failure", StageConfig.on_failure)),
            deterministic=raw.get("deterministic", StageConfig.deterministic),
            rerun=raw.get("rerun", StageConfig.rerun),
            batch_id=raw.get("batch_id", StageConfig.batch_id),
            max_message_bytes=size_fields.get("max_message_bytes") or StageConfig.max_message_bytes,
            prefetch=raw.get("prefetch", StageConfig.prefetch),
            stop_timeout=float(raw.get("stop_timeout", StageConfig.stop_timeout)),
            max_rss=size_fields.get("max_rss"),
        )
    except (TypeError, ValueError) as exc:
        problems.add(path, str(exc))
        return None
    clash = batchheader.markers_clash(getattr(stage_markers, n) for n in MARKER_NAMES) if stage.batch_id else []
    if clash:
        problems.add(
            (*path, "batch_id"),
            "a batch id header is text of "
            + repr(bytes(sorted(batchheader.ALPHABET)).decode())
            + f"; this stage's markers {', '.join(f'0x{m:02x}' for m in clash)} are among them: choose others",
        )
    scenario = Scenario(type=typ, mode=mode if mode in MODES[typ] else MODES[typ][0], markers=stage_markers, stage=name)
    problems.guard((*path, "command"), scenario.expand, command)
    return stage


def _offset_policy(raw: dict[str, Any], typ: str, mode: str, path: Path_, problems: _Problems) -> OffsetPolicy | None:
    """A stage's ``offset_policy``: required by a cyclic extractor whose offsets the
    supervisor keeps, refused elsewhere."""
    policy = None
    if "offset_policy" in raw:
        op = raw["offset_policy"]
        policy = OffsetPolicy(op["type"], op.get("start", 0), op.get("step", 1000), op.get("lag"))
    cyclic_extractor = typ == StageType.E and mode == Mode.CYCLIC
    if cyclic_extractor and raw.get("offsets", StageConfig.offsets) == Offsets.SUPERVISOR:
        if policy is None:
            problems.add(
                path, "offsets: supervisor needs an offset_policy (e.g. {type: counter, start: 0, step: 1000})"
            )
        else:
            from etlstage.protocol.offsets import make_policy

            args = (policy.kind, policy.start, policy.step, policy.lag, "offset_policy")
            problems.guard((*path, "offset_policy"), make_policy, *args)
        # instances > 1 is for the Spark engine: checked with the engine, after the flags
    elif policy is not None and not cyclic_extractor:
        problems.add((*path, "offset_policy"), "only a cyclic E-stage with offsets: supervisor uses it")
    return policy


def _check_stage_keys(raw: dict[str, Any], typ: str, path: Path_, problems: _Problems) -> None:
    """Keys a stage of this type has no use for."""
    if raw.get("partition_by") is not None and typ == StageType.E:
        problems.add((*path, "partition_by"), "an E-stage has no input to partition")
    if isinstance(raw.get("native"), str) and typ == StageType.T:
        problems.add((*path, "native"), "only E- and L-stages have native Spark implementations")
    if raw.get("batch_id"):
        _check_batch_id(raw, typ, path, problems)
    if "rerun" in raw and (typ != StageType.E or (raw.get("mode") or default_mode(typ)) != Mode.PLAIN):
        problems.add((*path, "rerun"), "only a plain E-stage is extracted whole again when run again")
    if raw.get("protocol", "marker") == "kcl-multilang" and typ == StageType.E:
        problems.add((*path, "protocol"), "kcl-multilang is for T- and L-stages")


def _check_batch_id(raw: dict[str, Any], typ: str, path: Path_, problems: _Problems) -> None:
    """``batch_id: true``: an L-stage whose batches the supervisor closes (the id is written
    before the batch, so its messages must be known), with markers no header can contain."""
    mode, driver = raw.get("mode") or default_mode(typ), raw.get("batch_driver", StageConfig.batch_driver)
    if typ != StageType.L or mode != Mode.BATCH or driver != BatchDriver.SUPERVISOR:
        problems.add(
            (*path, "batch_id"),
            f"batch ids are for L-stages in batch mode with batch_driver: supervisor "
            f"(this is a {typ}-stage, mode {mode}, batch_driver {driver})",
        )


def _stage_command(raw: dict[str, Any], path: Path_, problems: _Problems) -> list[str]:
    """The program a stage runs: a KCL worker behind the adapter that speaks markers for it."""
    command = problems.guard((*path, "command"), _command, raw["command"]) or []
    if raw.get("protocol", "marker") == "kcl-multilang":
        version = str(raw.get("protocol_version", 2))
        command = [*KCL_ADAPTER, "--protocol-version", version, "--", *command]
    return command


def _check_order(stages: list[StageConfig], problems: _Problems) -> None:
    types = [s.type for s in stages]
    if stages and not re.fullmatch(r"E+T*L+", "".join(types)):
        problems.add(
            ("stages",),
            f"stages must be one or more E, then any T, then one or more L, in that order; got {' → '.join(types)}",
        )


def _state_dir(data: dict[str, Any], name: str, source: str, base_dir: str, problems: _Problems) -> Path:
    """The pipeline's own folder under ``state_dir`` (relative to the file), checked."""
    root = Path(data.get("state_dir", ".etlstage"))
    if not root.is_absolute():
        root = Path(base_dir) / root
    state_dir = pipeline_dir(root, name)  # each pipeline's state in a folder of its own
    # the folders above state_dir checked once: state_dir itself is made owner-only before use
    for problem in state_dir_problems(root) or (state_dir_problems(state_dir, above=False) if root.is_dir() else []):
        if "state_dir" in data:
            problems.add(("state_dir",), problem)
        else:
            problems.found.append(f"{source}: state_dir: {problem}")
    return state_dir


def _services(data: dict[str, Any], problems: _Problems) -> list[ServiceConfig]:
    services = []
    for j, sv in enumerate(data.get("services") or []):
        where: Path_ = ("services", j)
        problems.guard((*where, "name"), _name, sv["name"])
        command = problems.guard((*where, "command"), _command, sv["command"])
        env = problems.guard((*where, "env"), _env, sv.get("env") or {})
        if sv.get("creates") is not None:
            problems.guard((*where, "creates"), _no_nul, sv["creates"])
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
    return services


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
