"""The supervisor engine (:mod:`etlstage.runtime`) behind :class:`~etlstage.engines.base.Engine`."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from typing import TYPE_CHECKING

from etlstage.config.model import PipelineConfig
from etlstage.engines.base import Attach, RunOptions, Tap, together

if TYPE_CHECKING:
    pass


class SupervisorEngine:
    kind = "supervisor"
    supports_tap = True

    def prepare(self, config: PipelineConfig) -> None:
        pass  # nothing outlives this process: its run lock is enough

    def run(self, config: PipelineConfig, options: RunOptions) -> int:
        from etlstage.runtime.runner import run_pipeline

        attaching: list[Attach] = []
        if config.http is not None:
            from etlstage.observe.server import serve

            attaching.append(functools.partial(serve, address=config.http))
        if options.export is not None:
            attaching.append(options.export.attach_supervisor)
        attach = together(attaching) if attaching else None
        return asyncio.run(
            run_pipeline(config, once=options.once, progress=options.progress, extra_env=options.env, attach=attach)
        )

    def status(self, config: PipelineConfig, *, as_json: bool) -> Callable[[], str]:
        from etlstage.observe.document import encode
        from etlstage.observe.status import render, status_document
        from etlstage.state.store import existing_store

        store = existing_store(config.state_dir)

        def show() -> str:
            doc = status_document(store)
            return encode(doc, indent=2) if as_json else "\n".join(render(doc, str(store.path)))

        return show

    def tap_refusal(self, config: PipelineConfig) -> str:
        return ""

    def open_tap(self, config: PipelineConfig, stage: str) -> Tap:
        from etlstage.runtime.tap import connect, offered_as, read_taps

        stream, _ = connect(config, stage)
        stages = {s.name: s for s in config.stages}
        return Tap(offered_as(stages[stage]), stream, read_taps(stream))
