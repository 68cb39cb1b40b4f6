"""Run a pipeline to its end: signals, progress, summary, exit status."""

from __future__ import annotations

import asyncio
import logging
import sys
from collections.abc import Callable
from typing import Any

from etlstage.config.model import PipelineConfig
from etlstage.errors import EtlstageError
from etlstage.kit.progress import report, summary
from etlstage.runtime.pipeline import Pipeline, install_signal_handlers
from etlstage.runtime.tasks import cancel

log = logging.getLogger("etlstage")

# Something started beside a run with the pipeline (the HTTP endpoints); returns how to stop it.
Attach = Callable[[Pipeline], Callable[[], None]]


async def run_pipeline(
    config: PipelineConfig,
    *,
    once: bool = False,
    progress: bool = True,
    extra_env: dict[str, str] | None = None,
    attach: Attach | None = None,
) -> int:
    """0 when done (or stopped gracefully), 1 on a pipeline failure, 2 on a state/config error."""
    try:
        pipeline = Pipeline(config, once=once, extra_env=extra_env)
        detach = attach(pipeline) if attach is not None else None
    except EtlstageError as exc:
        log.error("%s", exc)
        return exc.exit_code
    hard_stop: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    install_signal_handlers(pipeline, hard_stop)
    names = " → ".join(s.name for s in config.stages)
    log.info("pipeline %s: %s (state in %s)%s", config.name, names, config.state_dir, " --once" if once else "")
    runner: asyncio.Future[Any] = asyncio.ensure_future(pipeline.run())
    reporter = asyncio.ensure_future(report(pipeline)) if progress else None
    drain_over: asyncio.Future[Any] = asyncio.ensure_future(pipeline.drain_timed_out.wait())
    code = 0
    try:
        watched: set[asyncio.Future[Any]] = {runner, hard_stop, drain_over}
        await asyncio.wait(watched, return_when=asyncio.FIRST_COMPLETED)
        if hard_stop.done() and not runner.done():
            log.error("stopped at once: in-flight windows will be extracted again next run")
            code = 1
        elif drain_over.done() and not runner.done():
            log.error(
                "in-flight work did not drain within drain_timeout (%gs): stopping the workers; "
                "unfinished windows will be extracted again next run",
                config.drain_timeout,
            )
            await pipeline.stop_workers()
            code = 1
        else:
            runner.result()
    except EtlstageError as exc:
        log.error("pipeline failed: %s", exc)
        code = exc.exit_code  # 2 for the state store damaged under the run
    except Exception:
        log.exception("pipeline failed on an internal error (please report it with this traceback)")
        code = 1
    finally:
        pipeline.failed = pipeline.failed or code != 0  # what the metrics written at the end say
        tasks = [t for t in (runner, reporter, drain_over) if t is not None]
        await cancel(tasks)
        if detach is not None:
            detach()
    print(summary(pipeline), file=sys.stderr)
    return code
