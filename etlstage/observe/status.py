"""What ``etlstage status`` shows, and ``/api/status`` serves: one document, two renderings.

The document joins the state store (checkpoints, windows, dead letters, runs) with the
running supervisor's progress: the heartbeat it writes every 2 s when read from another
process, or the live state when served by the supervisor itself.  A run whose pid is
gone is marked dead at once, not after its heartbeat goes stale.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, cast

import psutil

from etlstage.kit.progress import resent_line
from etlstage.observe.document import (
    LastRunDoc,
    LiveDoc,
    RunDoc,
    RunLockDoc,
    SparkCheckpointDoc,
    StatusDoc,
    WindowInFlightDoc,
    deadletters,
)
from etlstage.state.lastrun import last_run
from etlstage.state.runlock import Holder, holder
from etlstage.state.store import StateStore

STALE_AFTER = 30.0  # seconds without a heartbeat from a live pid: "not responding"


def run_state(pid: int, started_at: float, heartbeat: float, now: float) -> str:
    """``running``, ``dead`` (its pid is gone or now belongs to a later process) or ``not responding``."""
    try:
        proc = psutil.Process(pid)
        if proc.status() == psutil.STATUS_ZOMBIE or proc.create_time() > started_at + 1.0:
            return "dead"
    except psutil.NoSuchProcess:
        return "dead"
    except psutil.Error:
        pass  # not ours to inspect: it exists
    return "not responding" if now - heartbeat > STALE_AFTER else "running"


def status_document(store: StateStore, live: LiveDoc | None = None) -> StatusDoc:
    """Everything ``status`` knows; ``live``: the serving supervisor's own live state."""
    now = time.time()
    runs: list[RunDoc] = []
    for pid, started_at, heartbeat, info in store.runs():
        own = live is not None and live.get("pid") == pid
        runs.append(
            {
                "pid": pid,
                "started_at": started_at,
                "heartbeat": now if own else heartbeat,
                "state": "running" if own else run_state(pid, started_at, heartbeat, now),
                "progress": live if own else cast(LiveDoc | None, info),
            }
        )
    running = [r for r in runs if r["state"] != "dead"]
    return {
        "engine": "supervisor",
        "time": now,
        "running": running,
        "dead": [
            {"pid": r["pid"], "started_at": r["started_at"], "heartbeat": r["heartbeat"]}
            for r in runs
            if r["state"] == "dead"
        ],
        "checkpoints": [
            {
                "source": c.source,
                "windows_done": c.windows_done,
                "messages": c.messages,
                "committed_end": c.committed_end,
                "updated_at": c.updated_at,
            }
            for c in store.checkpoints()
        ],
        "windows_in_flight": _windows(store, running, now),
        "deadletters": deadletters(store.deadletter_counts()),
        "last_run": cast(LastRunDoc | None, last_run(store)),
        "run_lock": run_lock(store.dir),
    }


def _windows(store: StateStore, running: list[RunDoc], now: float) -> list[WindowInFlightDoc]:
    """In-flight windows as the running supervisor sees them; else those a stopped run left."""
    live = [w for r in running if r["progress"] for w in r["progress"].get("windows", [])]
    if live:
        return [
            {
                "source": w["source"],
                "seq": w["seq"],
                "request": _request(w.get("request")),
                "opened_at": w["opened_at"],
                "age_seconds": round(now - w["opened_at"], 1),
                "messages": w["messages"],
                "state": "committing" if w.get("done") else "loading" if w["closed"] else "extracting",
            }
            for w in live
        ]
    return [
        {
            "source": w.source,
            "seq": w.seq,
            "request": w.request,
            "opened_at": w.opened_at,
            "age_seconds": round(now - w.opened_at, 1),
            "messages": None,
            "state": "in flight" if running else "left by a stopped run: extracted again by the next run",
        }
        for w in store.open_windows()
    ]


def _request(raw: str | None) -> object:
    if not raw:
        return None
    try:
        return json.loads(raw)
    except ValueError:
        return raw


def _when(ts: float | None) -> str:
    if ts is None:
        return "-"
    return dt.datetime.fromtimestamp(ts, dt.UTC).strftime("%Y-%m-%d %H:%M:%SZ")


def _age(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.1f}s"
    if seconds < 7200:
        return f"{seconds / 60:.1f}min"
    return f"{seconds / 3600:.1f}h"


def render(doc: StatusDoc, state_path: str) -> list[str]:
    """The text ``etlstage status`` prints, for either engine (Spark's checkpoint first)."""
    now = doc["time"]
    lines = render_spark_checkpoint(doc["spark_checkpoint"]) if "spark_checkpoint" in doc else []
    lines.append(f"state: {state_path}")
    running = doc["running"]
    lines.append(
        "running: "
        + (
            ", ".join(
                f"pid {r['pid']} since {_when(r['started_at'])}"
                + (
                    ""
                    if r["state"] == "running"
                    else f" (not responding: no heartbeat for {_age(now - r['heartbeat'])})"
                )
                for r in running
            )
            or "no"
        )
    )
    for d in doc["dead"]:
        lines.append(
            f"dead: supervisor pid {d['pid']} (started {_when(d['started_at'])}) is gone; last heartbeat "
            f"{_age(now - d['heartbeat'])} ago. What it had in flight will be extracted again by the next run."
        )
    lines += render_last_run(doc.get("last_run"))
    lines.append(render_run_lock(doc.get("run_lock")))
    for r in running:
        stages = r["progress"]["stages"] if r["progress"] else {}
        if stages:
            lines.append(
                f"  {'stage':<16} {'in':>12} {'out':>12} {'rate':>10} {'in flight':>9} {'restarts':>8} "
                f"{'memory, cpu':>16}"
            )
        for name, st in stages.items():
            # a figure the engine does not know is absent: shown as "-"
            in_flight = f"{st['in_flight']:>9}" if "in_flight" in st else f"{'-':>9}"
            used = f"{st['rss'] / 1e6:>5,.0f} MB cpu {st['cpu']:>3.0f}%" if "rss" in st and "cpu" in st else "-"
            lines.append(
                f"  {name:<16} {st['in']:>12,} {st['out']:>12,} {st.get('rate', 0):>8,.0f}/s {in_flight} "
                f"{st.get('restarts', 0):>8} {used:>16}"
            )
        resent = resent_line(
            {name: st.get("resent", 0) for name, st in stages.items()},
            {name: st["jobs"] for name, st in stages.items() if "jobs" in st},
        )
        if resent:
            lines.append(f"  {resent}")
    checkpoints = doc["checkpoints"]
    lines.append("checkpoints:" if checkpoints else "checkpoints: none yet")
    for c in checkpoints:
        messages = "-" if c["messages"] is None else f"{c['messages']:,}"
        end = f" committed end {json.dumps(c['committed_end'])}" if c["committed_end"] is not None else ""
        lines.append(
            f"  {c['source']:<20} windows done {c['windows_done']:>6}  messages {messages:>10}{end}"
            f"  at {_when(c['updated_at'])}"
        )
    windows = doc["windows_in_flight"]
    lines.append(f"windows in flight: {len(windows)}")
    for w in windows:
        got = f", {w['messages']:,} messages extracted" if w["messages"] is not None else ""
        req = f", request {json.dumps(w['request'])}" if w["request"] else ""
        lines.append(f"  {w['source']} #{w['seq']}: {w['state']}, open {_age(w['age_seconds'])}{got}{req}")
    dl = doc["deadletters"]
    lines.append(f"dead letters: {dl['total']} ({dl['new']} new)")
    return lines


def render_spark_checkpoint(c: SparkCheckpointDoc) -> list[str]:
    """Spark's checkpoint: micro-batches committed and in flight, the sources' offsets."""
    if c.get("unread"):
        return ["engine: spark", f"checkpoint: {c['path']} ({c['unread']})"]
    if c["last_committed_batch"] is None and not c["batches_in_flight"]:
        return ["engine: spark", f"checkpoint: {c['path']} (no micro-batch yet)"]
    in_flight = ", ".join(f"#{b} (replayed with the same offsets if the query stopped)" for b in c["batches_in_flight"])
    lines = [
        "engine: spark",
        f"checkpoint: {c['path']}",
        f"micro-batches committed: {c['committed_batches']} (last #{c['last_committed_batch']} "
        f"at {_when(c['updated_at'])})",
        f"in flight: {in_flight or 'none'}",
    ]
    lines.extend(f"  {name:<20} offset {json.dumps(off)}" for name, off in c["offsets"].items())
    return lines


def run_lock(state_dir: str | Path) -> RunLockDoc | None:
    """Who holds the pipeline's state now, as the status document says it."""
    held = holder(state_dir)
    return None if held is None else cast(RunLockDoc, dataclasses.asdict(held))


def render_run_lock(held: RunLockDoc | None) -> str:
    if held is None:
        return "run lock: free (no run holds this state)"
    return "run lock: held by " + Holder(**held).describe()


def render_last_run(last: Mapping[str, Any] | None) -> list[str]:
    """How the newest run ended: when, after how long, its exit status and its error's lines."""
    if last is None:
        return ["last run: none has ended yet"]
    lines = [
        f"last run: {last['outcome']}, exit status {last['exit_status']}, ended {_when(last['ended_at'])} "
        f"after {_age(last['seconds'])} (pid {last['pid']}, {last['engine']} engine)"
    ]
    error = (last.get("error") or "").splitlines()
    if error:
        lines.append(f"  error: {error[0]}")
        lines += [f"    {line}" for line in error[1:12]]
    return lines
