"""The engine a run uses: the ``engine:`` block of stages.yaml, overridden by flags.

Pure configuration: importing this module does not import pyspark, so ``etlstage
validate`` and the supervisor engine work without it.
"""

from __future__ import annotations

import os
from dataclasses import replace

from etlstage.config.model import PipelineConfig, StageConfig
from etlstage.errors import ConfigError

# Stage keys the Spark engine cannot honour: refused at start rather than ignored.
REFUSED_KEYS = {
    "max_rss": "the Spark engine does not replace a worker between batches by its memory; "
    "remove the key to run this file there (or run it with --engine supervisor)",
}


def apply_flags(config: PipelineConfig, engine: str | None, master: str | None) -> PipelineConfig:
    """``config`` with ``--engine`` / ``--master`` applied (flags win over the file)."""
    e = config.engine
    if engine is not None:
        e = replace(e, kind=engine)
    if master is not None:
        if e.kind != "spark":
            raise ConfigError(
                [f"--master {master!r} is for the Spark engine: add --engine spark (or engine: {{kind: spark}})"]
            )
        e = replace(e, master=master)
    config = replace(config, engine=e)
    if e.kind == "spark":
        check_for_spark(config)
    else:
        sharded = [s.name for s in config.stages if s.type == "E" and _supervisor_offsets(s) and s.instances != 1]
        if sharded:
            raise ConfigError(
                [
                    f"stage {name!r}: supervisor-managed offsets with instances > 1 need engine spark "
                    "(the supervisor keeps one offset sequence per stage): use instances: 1 or --engine spark"
                    for name in sharded
                ],
                config.source,
            )
    return config


def check_for_spark(config: PipelineConfig) -> None:
    """What the Spark engine cannot run (yet), each problem named with its stage."""
    problems: list[str] = []
    loads = [s for s in config.stages if s.type == "L"]
    first = loads[0]
    for s in loads[1:]:
        if (s.instances, s.partition_by) != (first.instances, first.partition_by):
            problems.append(
                f"stage {s.name!r}: under engine spark every L-stage shares the sink's partitions; "
                f"give it instances {first.instances} and partition_by {first.partition_by!r} like {first.name!r}"
            )
    for s in config.stages:
        if s.type == "E" and s.instances != 1 and not _supervisor_offsets(s):
            problems.append(
                f"stage {s.name!r}: instances {s.instances}: under engine spark an E-stage runs on the driver "
                "unless its offsets are supervisor-managed; use instances: 1"
            )
    for s in config.stages:
        for key in REFUSED_KEYS:
            if getattr(s, key) is not None:
                problems.append(f"stage {s.name!r}: {key}: {REFUSED_KEYS[key]}")
        if s.rerun != "warn":
            problems.append(
                f"stage {s.name!r}: rerun: {s.rerun}: the Spark engine does not check a plain extractor's "
                "earlier runs yet; remove the key to run this file there (or run it with --engine supervisor)"
            )
    problems.extend(shipping_problems(config.engine.ship))
    if problems:
        raise ConfigError(problems, config.source)


def shipping_problems(paths: list[str]) -> list[str]:
    """``engine.ship``: each path exists here, and no two share a name (an executor keeps
    shipped files by name in one folder)."""
    problems = []
    seen: dict[str, str] = {}
    for path in paths:
        name = os.path.basename(os.path.normpath(path))
        if not os.path.exists(path):
            problems.append(f"engine.ship: {path} does not exist (paths are relative to the pipeline file)")
        elif name in seen:
            problems.append(f"engine.ship: {path} and {seen[name]} have the same name {name!r}: rename one")
        seen.setdefault(name, path)
    return problems


def _supervisor_offsets(stage: StageConfig) -> bool:
    return stage.mode == "cyclic" and stage.offsets == "supervisor"


__all__ = ["REFUSED_KEYS", "apply_flags", "check_for_spark", "shipping_problems"]
