"""Services: programs a pipeline needs beside its stages (an emulator, a data generator).

Each is started, in order, before the stages.  ``ready: exit`` waits for it to finish
with status 0 (a preparation step).  ``ready: line`` (the default) waits for a line
``READY`` on its stdout; ``KEY=VALUE`` lines before it are added to every stage's
environment — that is how an embedded emulator hands its endpoint to the workers.
Services run until the pipeline ends, then they are stopped like workers (stdin closed,
SIGTERM, SIGKILL of the tree); on Linux they die with the supervisor too.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import time
from pathlib import Path

from etlstage.config.model import ServiceConfig
from etlstage.errors import PipelineError, WorkerError
from etlstage.kit.transport import ProcessTransport
from etlstage.redact import redact_argv

log = logging.getLogger("etlstage.services")
_EXPORT = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)=(.*)$")


class Services:
    def __init__(self, services: list[ServiceConfig], base_dir: str) -> None:
        self.services = [s for s in services if s.enabled]
        self.base_dir = base_dir
        self.running: list[tuple[ServiceConfig, ProcessTransport]] = []
        self.exports: dict[str, str] = {}
        self._echoes: list[asyncio.Future[None]] = []  # read each service's stdout after READY

    async def start(self, env: dict[str, str]) -> dict[str, str]:
        """Start every service in order; return the variables they exported."""
        for svc in self.services:
            if svc.ready == "exit" and svc.creates and (Path(self.base_dir) / svc.creates).exists():
                log.info("service %s: %s exists already; skipped", svc.name, svc.creates)
                continue
            full_env = {**os.environ, **env, **self.exports, **svc.env}
            t = await ProcessTransport.spawn(svc.command, full_env, self.base_dir, f"service {svc.name}")
            started = time.monotonic()
            try:
                if svc.ready == "exit":
                    t.close_input()
                    code = await asyncio.wait_for(self._drain_until_exit(t), svc.timeout)
                    await t.stop(grace=1.0)  # it has exited: release its pipes
                    if code != 0:
                        raise self._failed(svc, t, f"exited with status {code}")
                    log.info("service %s: done in %.1fs", svc.name, time.monotonic() - started)
                    continue
                self.running.append((svc, t))
                await asyncio.wait_for(self._read_exports(svc, t), svc.timeout)
                # a chatty service must never block on a full stdout pipe
                self._echoes.append(asyncio.ensure_future(self._echo(svc, t)))
            except TimeoutError:
                await t.abort()
                raise self._failed(svc, t, f"was not ready within {svc.timeout:g}s") from None
            log.info("service %s: ready (pid %s) in %.1fs", svc.name, t.pid, time.monotonic() - started)
        return dict(self.exports)

    async def _drain_until_exit(self, t: ProcessTransport) -> int:
        while await t.read():
            pass
        return await t.wait()

    async def _read_exports(self, svc: ServiceConfig, t: ProcessTransport) -> None:
        pending = b""
        while True:
            chunk = await t.read()
            if not chunk:
                raise self._failed(svc, t, "exited before it printed READY")
            lines = (pending + chunk).split(b"\n")
            pending = lines.pop()
            for raw in lines:
                line = raw.decode("utf-8", "replace").strip()
                if line == "READY":
                    return
                m = _EXPORT.match(line)
                if m:
                    self.exports[m.group(1)] = m.group(2)
                elif line:
                    log.info("[service %s] %s", svc.name, line)

    async def _echo(self, svc: ServiceConfig, t: ProcessTransport) -> None:
        """Log what a ready service still writes to stdout, line by line, until it ends."""
        pending = b""
        while chunk := await t.read():
            lines = (pending + chunk).split(b"\n")
            pending = lines.pop()[-8192:]
            for raw in lines:
                if raw.strip():
                    log.info("[service %s] %s", svc.name, raw.decode("utf-8", "replace").strip())

    def _failed(self, svc: ServiceConfig, t: ProcessTransport, what: str) -> PipelineError:
        tail = "\n".join(f"  | {x}" for x in t.stderr_tail()[-10:]) or "  (no stderr)"
        return PipelineError(f"service {svc.name!r} {what}\n  command: {redact_argv(svc.command)!r}\n  stderr:\n{tail}")

    async def stop(self) -> None:
        for svc, t in reversed(self.running):
            try:
                await t.stop(grace=5.0, term_grace=5.0)
            except (WorkerError, OSError) as exc:
                log.warning("service %s: %s", svc.name, exc)
        self.running.clear()
        for echo in self._echoes:
            echo.cancel()
        await asyncio.gather(*self._echoes, return_exceptions=True)
        self._echoes.clear()
