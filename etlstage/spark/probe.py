"""Can every stage's program be started where its tasks run?  Checked before the query starts."""

from __future__ import annotations

import os
import shutil
import socket
from pathlib import Path

from etlstage.config.model import StageConfig
from etlstage.runtime.transport import resolve_program
from etlstage.spark.conversation import worker_env
from etlstage.spark.plan import Plan
from etlstage.spark.shipping import localize


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


__all__ = ["find_programs"]
