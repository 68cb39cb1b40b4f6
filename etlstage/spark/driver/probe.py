"""Can every stage's program be started where its tasks run?  Checked before the query starts."""

from __future__ import annotations

import os
import shutil
import socket
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from etlstage.config.model import StageConfig
from etlstage.kit.transport import resolve_program, worker_env
from etlstage.spark.setup.shipping import localize
from etlstage.spark.setup.spark_session import default_parallelism
from etlstage.spark.tasks.ownership import retire
from etlstage.spark.tasks.plan import Plan

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import SparkSession


def find_programs(plan: Plan, stages: list[StageConfig]) -> list[str]:
    """One line per stage whose program is missing (or not executable) on this host."""
    host = socket.gethostname()
    problems = []
    for stage in stages:
        scenario = stage.scenario(0, "")
        env = worker_env(stage, scenario, plan.extra_env)
        base = plan.config.base_dir
        argv, cwd = localize(scenario.expand(stage.argv()), stage.cwd or base, base, plan.shipped)
        argv = resolve_program(argv, env)
        program = argv[0]
        if "/" in program:
            path = Path(program) if os.path.isabs(program) else Path(cwd) / program
            found = path.is_file() and os.access(path, os.X_OK)
        else:
            found = shutil.which(program, path=os.pathsep.join(os.get_exec_path(env))) is not None
        if not found:
            problems.append(
                f"stage {stage.name!r}: program {program!r} not found (or not executable) on {host} "
                f"(working directory {cwd}); install it on every node, put it on a shared mount, "
                "ship it with engine.ship, or give its full path in 'command'"
            )
        elif not os.path.isdir(cwd):
            problems.append(f"stage {stage.name!r}: its working directory {cwd} does not exist on {host}")
    return problems


def on_every_core(spark: SparkSession, task: Callable[[], list[str]]) -> list[str]:
    """What ``task`` returns, run by a task on every core through the same Arrow path as
    the query's tasks (so the Python processes it warms up are the ones they reuse)."""
    import pyarrow as pa

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for _ in batches:
            pass
        yield pa.RecordBatch.from_arrays([pa.array(task(), pa.string())], ["line"])

    slots = default_parallelism(spark)
    rows = spark.range(0, slots, 1, slots).mapInArrow(run, "line string").collect()
    return sorted({r.line for r in rows})


def probe_job(spark: SparkSession, plan: Plan, names: list[str]) -> list[str]:
    """``names``' programs looked for on every core (a line per problem)."""
    return on_every_core(spark, lambda: probe_task(plan, names))


def retire_job(spark: SparkSession, run_id: str) -> list[str]:
    """The run's idle workers stopped on every host a task reaches (the hosts' names):
    for servers whose Python processes outlive the query (Spark Connect)."""
    run_id = str(run_id)

    def task() -> list[str]:
        retire(run_id)
        return [socket.gethostname()]

    return on_every_core(spark, task)


def probe_task(plan: Plan, names: list[str]) -> list[str]:
    """What a task of the start-up job does: warm its Python process up, then look for the programs."""
    warm_up()
    return find_programs(plan, [plan.config.stage(n) for n in names])


def warm_up() -> None:
    """Import what the query's tasks import, in the Spark Python process a probe task runs
    in: Spark reuses it for the query's first tasks, which then start without the wait."""
    import pandas  # noqa: F401  (pyspark's Arrow paths import it)
    import pyarrow  # noqa: F401
    import pyspark.sql.pandas.serializers  # noqa: F401

    import etlstage.spark.tasks.sink
    import etlstage.spark.tasks.transform  # noqa: F401


__all__ = ["find_programs", "on_every_core", "probe_job", "probe_task", "retire_job", "warm_up"]
