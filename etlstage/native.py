"""The public API of a native stage: what a Spark implementation of an E- or L-worker receives.

Under ``etlstage run --engine spark`` a program may run as Spark itself instead of as a
worker process (docs/writing-workers.md, "Native stages"). Its factory is called with a
:class:`NativeContext`: the stage as stages.yaml declares it and what its worker would
have been given. :func:`parse_argv` reads the stage's arguments with the worker's own
parser, so that one stages.yaml runs on both engines.

This module imports neither the engine nor pyspark: a native stage and its tests use it
without a JVM.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, NoReturn, Protocol

from etlstage.config.model import StageConfig
from etlstage.errors import ConfigError
from etlstage.protocol.markers import Markers

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger("etlstage.native")


class Keep(Protocol):
    """``ctx.keep``: a stage's write-once files on the driver, reachable from any task."""

    def __call__(self, name: str, data: bytes | None) -> bytes | None: ...

    def to_option(self) -> str: ...


@dataclass(frozen=True)
class NativeContext:
    """What a native source or sink factory is given: its stage and what its worker would have had."""

    stage: StageConfig
    argv: list[str]  # the command's arguments after the program
    checkpoint: str  # a directory of the stage's own on the driver, beside the query's checkpoint
    env: dict[str, str] = field(default_factory=dict)  # the worker's environment (ETLSTAGE_* included)
    state_dir: str = ""  # the stage's own state directory, as its worker gets it
    once: bool = False  # --once: a source ends when it has nothing more
    cwd: str = "."  # the directory the worker would have run in: relative paths in argv start here
    spark: SparkSession | None = None  # the engine's session (a sink also has its DataFrame's)
    # from a task on any executor: keep(name, data) writes checkpoint/name once, durably, on the
    # driver, and returns what it holds (data, or what an earlier attempt wrote); keep(name, None)
    # reads it (None: absent). Picklable; as a string option: keep.to_option() / etlstage.sparkapi.KeepOnce.from_option
    keep: Keep | None = None

    @property
    def name(self) -> str:
        return self.stage.name

    @property
    def markers(self) -> Markers:
        """The stage's markers (a native source's rows carry none; see docs/spark-engine.md)."""
        return self.stage.markers

    @property
    def where(self) -> str:
        """How errors name the stage."""
        return f"stage {self.stage.name!r} ({self.program} under the Spark engine)"

    @property
    def program(self) -> str:
        return os.path.basename(self.stage.command[0]) if self.stage.command else self.stage.name

    def path(self, value: str) -> str:
        """A path argument as the worker would have read it (relative to its directory)."""
        return value if os.path.isabs(value) else os.path.join(self.cwd, value)


def parse_argv(
    ctx: NativeContext, parser: argparse.ArgumentParser, worker_only: Mapping[str, str] | None = None
) -> argparse.Namespace:
    """``ctx.argv`` parsed with the worker's own ``parser``, as the worker would parse it.

    ``worker_only`` maps the destinations of options that mean something only to the
    worker process (its state directory, threads, logging…) to why: when given they are
    dropped — left at the parser's default — with one log line each, so that the same
    stages.yaml runs on both engines. A bad argument, or ``--help``, is a ConfigError
    naming the stage and the argument (exit 2 from the CLI).
    """
    worker_only = worker_only or {}
    unknown = set(worker_only) - {a.dest for a in parser._actions}
    if unknown:
        raise ValueError(f"{parser.prog}: no option with destination {', '.join(sorted(unknown))}")
    defaults = {a.dest: a.default for a in parser._actions if a.dest in worker_only}

    def error(message: str) -> NoReturn:
        raise ConfigError([message], ctx.where)

    said = io.StringIO()
    saved_error = parser.error
    parser.error = error  # type: ignore[method-assign]
    try:
        for action in parser._actions:
            if action.dest in worker_only:
                action.default = argparse.SUPPRESS  # in the namespace only when given
        with contextlib.redirect_stdout(said), contextlib.redirect_stderr(said):
            ns = parser.parse_args(ctx.argv)
    except SystemExit:  # --help or --version printed their text
        raise ConfigError(["--help: not an option for a stage that runs"], ctx.where) from None
    finally:
        parser.error = saved_error  # type: ignore[method-assign]
        for action in parser._actions:
            if action.dest in defaults:
                action.default = defaults[action.dest]
    for dest, why in worker_only.items():
        if dest in vars(ns):
            log.info("%s: ignored under the Spark engine: %s", ctx.where, why)
        setattr(ns, dest, defaults[dest])
    return ns


__all__ = ["Keep", "NativeContext", "parse_argv"]
