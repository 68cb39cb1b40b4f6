"""The pipeline: stages wired in levels, windows tracked, checkpoints committed.

Levels: 0 holds the E-stages, 1..t the T-stages in order, t+1 the L-stages (each
L-stage receives every result).  A window is done when nothing derived from it is
left at any level; windows of one extractor commit in order (docs/protocol.md: windows).
"""

from __future__ import annotations

import asyncio
import collections
import json
import logging
import os
import signal
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from etlstage.config.model import PipelineConfig, StageConfig
from etlstage.errors import PipelineError, StateError
from etlstage.kit.admit import admit, refuse
from etlstage.kit.replays import marked_for_replay
from etlstage.kit.services import Services
from etlstage.kit.stats import LatencyHistogram, RateHistory, StageStats, stage_document
from etlstage.kit.transport import ProcessTransport, Transport, worker_env
from etlstage.observe.document import WorkerDoc
from etlstage.protocol.framing import split_block
from etlstage.protocol.offsets import make_policy
from etlstage.protocol.partition import parse_pointer, partition_key, partition_of
from etlstage.protocol.scenario import Scenario
from etlstage.protocol.vocabulary import Mode, Offsets, StageType
from etlstage.runtime import reruns
from etlstage.runtime.driver import STOP, EmitFn, ExtractDriver, TransformDriver
from etlstage.runtime.flow import Inbox, Job, Piece, Window
from etlstage.runtime.tap import Taps
from etlstage.runtime.tasks import run_all, run_until
from etlstage.state.store import StateStore, ensure_private_dir

log = logging.getLogger("etlstage.pipeline")
REPLAY = "deadletter#"  # the source name of a window that re-injects a dead letter
HEARTBEAT_EVERY = 2.0  # s: the live document written for `etlstage status`, rates sampled
# s: a commit has the live document written again this soon, so the status table's figures
# trail the checkpoints beside them by no more (commits closer together share one write)
HEARTBEAT_AFTER_COMMIT = 0.2


@dataclass
class Source:
    """An E-stage instance and the windows it opened, oldest first."""

    label: str
    stage: StageConfig
    windows: collections.deque[Window] = field(default_factory=collections.deque)
    next_seq: int = 0
    next_start: object = None  # supervisor-managed offsets: start of the next request
    changed: asyncio.Event = field(default_factory=asyncio.Event)
    commit_latency: LatencyHistogram = field(default_factory=LatencyHistogram)  # opened -> committed


class Pipeline:
    def __init__(self, config: PipelineConfig, *, once: bool = False, extra_env: dict[str, str] | None = None) -> None:
        self.config = config
        self.once = once
        self.extra_env = extra_env or {}
        self.state_dir = Path(config.state_dir)
        self.store = StateStore(self.state_dir, config.source)
        ext = [s for s in config.stages if s.type == StageType.E]
        trans = [s for s in config.stages if s.type == StageType.T]
        loads = [s for s in config.stages if s.type == StageType.L]
        self.levels: list[list[StageConfig]] = [ext, *([t] for t in trans), loads]
        self.n_levels = len(self.levels)
        self.stats = {s.name: StageStats(s.name, s.type) for s in config.stages}
        for s in config.stages:  # every instance has its series from the start: an idle one shows 0
            for i in range(s.instances):
                self.stats[s.name].instance(i)
        self.history = RateHistory()  # sampled with each heartbeat: current rates, charts
        self.taps = Taps(config)  # etlstage tap: what leaves a stage, offered without waiting
        self.inputs: dict[str, list[Inbox]] = {}
        for stages in self.levels[1:]:
            for s in stages:
                if s.keyed and s.instances > 1:
                    self.inputs[s.name] = [Inbox(s.markers.EOM, config.buffer_bytes) for _ in range(s.instances)]
                else:
                    box = Inbox(s.markers.EOM, config.buffer_bytes)
                    self.inputs[s.name] = [box] * s.instances
        self.sources: dict[str, Source] = {}
        self._extractors: list[ExtractDriver] = []
        self.stopping = False
        self.failed = False  # a stage failed: the run ends with an error
        self.drain_timed_out = asyncio.Event()  # a graceful stop ran out of drain_timeout
        self._committed = asyncio.Event()  # a window was committed since the last heartbeat
        self._drivers_running: list[ExtractDriver | TransformDriver] = []
        self.started = time.monotonic()
        self._all_inboxes = list({id(b): b for boxes in self.inputs.values() for b in boxes}.values())
        self._policies = {
            s.name: make_policy(
                s.offset_policy.kind,
                s.offset_policy.start,
                s.offset_policy.step,
                s.offset_policy.lag,
                f"stage {s.name!r}: offset_policy",
            )
            for s in ext
            if s.mode == Mode.CYCLIC and s.offsets == Offsets.SUPERVISOR and s.offset_policy
        }

    # --- spawning ---------------------------------------------------------------------------

    def stage_dir(self, stage: StageConfig) -> str:
        return str(ensure_private_dir(self.state_dir / "stages" / stage.name))

    async def spawn(self, stage: StageConfig, scenario: Scenario, label: str) -> Transport:
        env = worker_env(stage, scenario, self.extra_env)
        argv = scenario.expand(stage.argv())
        cwd = stage.cwd or self.config.base_dir
        return await ProcessTransport.spawn(argv, env, cwd, label)

    # --- moving pieces between levels -----------------------------------------------------

    def emitter(self, level: int, stage: StageConfig) -> EmitFn:
        targets = self.levels[level + 1]

        async def emit(piece: Piece) -> None:
            self.taps.offer(stage.name, piece.block, piece.count)
            for t in targets:
                block, count, refused = admit(
                    piece.block, piece.count, stage.markers, t.markers, t.max_message_bytes, f"stage {t.name!r}"
                )
                if refused:
                    self._refuse(t, refused)
                if not count:
                    continue
                if t.type == StageType.L:
                    self.taps.offer(t.name, block, count)  # a loader's tap: what it is given
                boxes = self.inputs[t.name]
                for i, part, n in _routed(block, count, t):
                    piece.window.add(level + 1, n)
                    try:
                        await boxes[i].put(Piece(part, n, piece.window))
                    except BaseException:  # cut short (its worker failed): never delivered, the
                        piece.window.release(level + 1, n)  # job is sent again and counted then
                        raise

        return emit

    # --- windows ----------------------------------------------------------------------------

    def open_window(self, label: str, request: object) -> Window:
        src = self.sources[label]
        w = Window(label, src.next_seq, self.n_levels, request, self._window_changed)
        src.next_seq += 1
        src.windows.append(w)
        doc = json.loads(request) if isinstance(request, bytes) and request else None
        self.store.open_window(label, w.seq, doc)
        return w

    def _window_changed(self, w: Window) -> None:
        for box in self._all_inboxes:
            box.notify()
        if w.done:
            if w.source.startswith(REPLAY):
                self.store.set_deadletter_status([int(w.source[len(REPLAY) :])], "replayed")
            else:
                self._commit_done(self.sources[w.source])

    def _inject_replays(self) -> None:
        """Dead letters marked by `etlstage deadletter replay` go back to their stage's inbox."""
        for r in marked_for_replay(self.store, self.config.stages):
            level = next(lv for lv, stages in enumerate(self.levels) if any(s.name == r.stage.name for s in stages))
            w = Window(f"{REPLAY}{r.deadletter.id}", 0, self.n_levels, None, self._window_changed)
            w.add(level, r.count)
            for i, part, n in _routed(r.block, r.count, r.stage):  # by key, as when it first came
                self.inputs[r.stage.name][i].put_nowait(Piece(part, n, w))
            w.close()
            log.info("dead letter #%d: %d message(s) sent again to stage %r", r.deadletter.id, r.count, r.stage.name)

    def _commit_done(self, src: Source) -> None:
        committed = False
        while src.windows and src.windows[0].done:
            w = src.windows.popleft()
            end = json.loads(w.request).get("end") if isinstance(w.request, bytes) and w.request else None
            self.store.commit(src.label, w.seq, end, w.messages)
            src.commit_latency.observe(max(0.0, time.time() - w.opened))
            committed = True
        if committed:
            src.changed.set()
            self._committed.set()

    async def next_request(self, label: str) -> object:
        """Wait until ``label`` may be sent its next cycle request, and make it (or STOP)."""
        src = self.sources[label]
        stage = src.stage
        limit = 1 if stage.offsets == Offsets.WORKER else self.config.max_inflight_windows
        while True:
            if self.stopping:
                return STOP
            if len(src.windows) < limit:
                break
            src.changed.clear()
            await src.changed.wait()
        if stage.offsets == Offsets.WORKER:
            return b""
        policy = self._policies[stage.name]
        while True:
            span = policy.window(src.next_start)
            if span is not None:
                break
            if self.once:
                return STOP
            await asyncio.sleep(min(policy.wait_seconds(src.next_start), stage.poll_interval) or 0.05)
            if self.stopping:
                return STOP
        src.next_start = span[1]
        return json.dumps({"start": span[0], "end": span[1]}, separators=(",", ":")).encode()

    # --- dead letters -----------------------------------------------------------------------

    def _refuse(self, stage: StageConfig, refused: list[tuple[bytes, str]]) -> None:
        """Messages that cannot be written to ``stage``: its on_failure policy decides."""
        self.stats[stage.name].deadletters += refuse(self.store, stage, refused)

    def deadletter(self, stage: StageConfig, job: Job, error: str) -> None:
        self.store.set_aside(stage.name, job.attempts, error, job.block, job.messages, stage.markers.eom)

    # --- running ----------------------------------------------------------------------------

    def _drivers(self) -> list[tuple[int, ExtractDriver | TransformDriver]]:
        out: list[tuple[int, ExtractDriver | TransformDriver]] = []
        for level, stages in enumerate(self.levels):
            for s in stages:
                stats = self.stats[s.name]
                sdir = self.stage_dir(s)
                if level == 0:
                    for i in range(s.instances):
                        label = s.label(i)
                        end, done = self.store.committed(label)
                        policy = self._policies.get(s.name)
                        self.sources[label] = Source(
                            label,
                            s,
                            next_seq=done,
                            next_start=end if end is not None else (policy.first() if policy else None),
                        )
                    out.append(
                        (
                            level,
                            ExtractDriver(
                                s,
                                sdir,
                                self.spawn,
                                stats,
                                self.emitter(0, s),
                                self.open_window,
                                self.next_request,
                                self.once,
                            ),
                        )
                    )
                else:
                    emit = self.emitter(level, s) if s.type == StageType.T else _no_emit
                    driver = TransformDriver(
                        s, level, sdir, self.spawn, stats, self.inputs[s.name], emit, self.deadletter
                    )
                    driver.pipeline_name = self.config.name or ""
                    out.append((level, driver))
        return out

    async def run(self) -> None:
        """Run to the end (``once``) or until :meth:`stop`; raises PipelineError on failure."""
        services = Services(self.config.services, self.config.base_dir)
        try:
            self.extra_env.update(await services.start(self.extra_env))
            await self._run()
        except Exception:
            self.failed = True
            raise
        finally:
            await services.stop()

    async def _run(self) -> None:
        reruns.check(self.config.stages, self.store.checkpoints())
        stale = self.store.forget_open_windows()
        if stale:
            log.info("%d window(s) left open by an earlier run will be extracted again", stale)
        drivers = self._drivers()
        self._drivers_running = [d for _, d in drivers]
        self._inject_replays()
        self._extractors = [d for _, d in drivers if isinstance(d, ExtractDriver)]
        by_level: dict[int, list[ExtractDriver | TransformDriver]] = collections.defaultdict(list)
        for level, d in drivers:
            by_level[level].append(d)

        async def run_level(level: int) -> None:
            await run_all(*(d.run() for d in by_level[level]))
            # nothing more will come out of this level: close the next level's inboxes
            if level + 1 < self.n_levels:
                for s in self.levels[level + 1]:
                    for box in self.inputs[s.name]:
                        box.close()

        self.store.heartbeat(self.progress())
        await self.taps.serve()
        try:
            # the live document beside the run, for as long as it runs
            await run_until(run_all(*(run_level(level) for level in range(self.n_levels))), self._heartbeat())
        except BaseException:
            # every worker killed and reaped; the error that ended the run is the one raised
            await asyncio.gather(*(d.abort_all() for _, d in drivers), return_exceptions=True)
            raise
        finally:
            await self.taps.close("the pipeline ended")
            self.store.end_run()
        undone = [w for src in self.sources.values() for w in src.windows if not w.done]
        if undone and not self.stopping:
            raise unfinished_windows(undone)

    async def _heartbeat(self) -> None:
        """The live document, every HEARTBEAT_EVERY seconds and soon after a commit; rates
        are sampled on the steady beat only (they are differences between samples)."""
        next_sample = time.monotonic() + HEARTBEAT_EVERY
        while True:
            try:
                await asyncio.wait_for(self._committed.wait(), max(0.0, next_sample - time.monotonic()))
                await asyncio.sleep(HEARTBEAT_AFTER_COMMIT)
            except TimeoutError:
                pass
            self._committed.clear()
            if time.monotonic() >= next_sample:
                self.history.sample(self.stats)
                next_sample = time.monotonic() + HEARTBEAT_EVERY
            try:
                self.store.heartbeat(self.progress())  # also finds state.db truncated or replaced
            except StateError as exc:
                log.error("%s; stopping", exc)
                self.stop()  # the end of the run reports it again: exit 2
                return

    def stop(self) -> None:
        """Graceful: no new requests; what is in flight drains (for at most
        ``drain_timeout``: then :attr:`drain_timed_out` is set); then workers stop."""
        if not self.stopping:
            log.info("stopping: no new requests; draining what is in flight (at most %gs)", self.config.drain_timeout)
            asyncio.get_running_loop().call_later(self.config.drain_timeout, self.drain_timed_out.set)
        self.stopping = True
        for src in self.sources.values():
            src.changed.set()
        for d in self._extractors:
            d.request_stop()

    async def stop_workers(self) -> None:
        """Give every worker its stage's stop sequence (none is started again)."""
        await asyncio.gather(*(d.stop_all() for d in self._drivers_running))

    @property
    def state(self) -> str:
        """``running``, ``draining`` or ``failed`` (:data:`etlstage.observe.document.PIPELINE_STATES`)."""
        return "failed" if self.failed else "draining" if self.stopping else "running"

    def progress(self) -> dict[str, object]:
        """The live state of this run: the document ``etlstage status`` reads from the
        heartbeat (every 2 s, and soon after a commit) and the HTTP endpoints serve, with the fields and meaning
        that :class:`etlstage.observe.document.LiveDoc` declares for both engines.  One
        pass over the stages, on the event loop, never on the message path."""
        now = time.time()
        elapsed = time.monotonic() - self.started
        stages: dict[str, object] = {}
        for name, s in self.stats.items():
            inboxes = list({id(b): b for b in self.inputs.get(name, [])}.values())
            resources = s.worker_resources()
            workers: list[WorkerDoc] = []
            for instance, transport in sorted(s.workers.items()):
                rss, cpu = resources.get(instance, (0, 0.0))
                workers.append(
                    {
                        "instance": instance,
                        "pid": transport.pid,
                        "rss": rss,
                        "cpu": round(cpu, 1),
                        "cpu_seconds": transport.cpu_seconds(),
                    }
                )
            doc = stage_document(s, self.history)
            doc.update(
                {
                    "in_flight": s.in_flight,
                    "resent": s.resent,
                    "queued": {"messages": sum(b.messages for b in inboxes), "bytes": sum(b.bytes for b in inboxes)},
                    "rss": sum(r[0] for r in resources.values()),
                    "cpu": round(sum(r[1] for r in resources.values()), 1),
                    "workers": workers,
                    "instances": [
                        {"instance": i, "restarts": c.restarts, "in": c.messages_in, "out": c.messages_out}
                        for i, c in sorted(s.instances.items())
                    ],
                }
            )
            stages[name] = doc
        return {
            "engine": "supervisor",
            "pid": os.getpid(),
            "pipeline": self.config.name,
            "time": now,
            "started_at": now - elapsed,
            "elapsed": round(elapsed, 3),
            "state": self.state,
            "stages": stages,
            "windows_in_flight": sum(len(src.windows) for src in self.sources.values()),
            "windows": [
                {
                    "source": w.source,
                    "seq": w.seq,
                    "closed": w.closed,
                    "done": w.done,
                    "messages": w.messages,
                    "opened_at": w.opened,
                    "request": w.request.decode(errors="replace") if isinstance(w.request, bytes) else None,
                }
                for src in self.sources.values()
                for w in src.windows
            ],
            "sources": [
                {
                    "source": label,
                    "stage": src.stage.name,
                    "instance": int(label.rsplit("#", 1)[1]) if "#" in label else 0,
                    "windows_opened": src.next_seq,  # counted across runs: a window's seq is its number
                    "windows_committed": src.next_seq - len(src.windows),
                    "windows_in_flight": len(src.windows),
                    "commit_latency": {
                        "buckets": src.commit_latency.cumulative(),
                        "sum": round(src.commit_latency.sum, 6),
                    },
                }
                for label, src in self.sources.items()
            ],
        }


async def _no_emit(piece: Piece) -> None:  # an L-stage has no results
    raise AssertionError("L-stage results are refused by the driver")


def _routed(block: bytes, count: int, stage: StageConfig) -> list[tuple[int, bytes, int]]:
    """Where ``count`` messages for ``stage`` go: (instance, messages, count) — by the hash
    of each message's key under ``partition_by``, else all to the stage's one inbox."""
    if stage.keyed and stage.instances > 1:
        return [(i, part, n) for i, (part, n) in enumerate(_partition(block, stage)) if n]
    return [(0, block, count)]


def _partition(block: bytes, stage: StageConfig) -> list[tuple[bytes, int]]:
    """Split a block by the hash of each message's ``partition_by`` key (per-message JSON)."""
    eom = stage.markers.EOM
    parts: list[list[bytes]] = [[] for _ in range(stage.instances)]
    tokens = parse_pointer(stage.partition_by or "")
    for m in split_block(block, stage.markers):
        parts[partition_of(partition_key(m, tokens), stage.instances)].append(m)
    return [(eom.join(p) + eom if p else b"", len(p)) for p in parts]


def install_signal_handlers(pipeline: Pipeline, hard_stop: asyncio.Future[None]) -> None:
    loop = asyncio.get_running_loop()
    count = {"n": 0}

    def on_signal(sig: signal.Signals) -> None:
        count["n"] += 1
        if count["n"] == 1:
            log.warning("received %s: stopping gracefully (again to stop at once)", sig.name)
            pipeline.stop()
        elif not hard_stop.done():
            log.error("received %s again: stopping at once", sig.name)
            hard_stop.set_result(None)

    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, on_signal, sig)


SHOWN_WINDOWS = 3  # an error names this many of the windows left unfinished, and counts them all


def unfinished_windows(undone: Sequence[object]) -> PipelineError:
    """The error of a run whose workers all ended with windows still open: a bug guard (the
    run does not exit 0 with messages unaccounted for), naming the first few windows."""
    return PipelineError(f"{len(undone)} window(s) were not completed: {undone[:SHOWN_WINDOWS]}")


__all__ = ["Pipeline", "install_signal_handlers"]
