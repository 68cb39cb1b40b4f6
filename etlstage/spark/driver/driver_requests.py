"""What the driver line (:mod:`etlstage.spark.driver_line`) does for a run: each request's
handler over the run's plan, in the driver's folders.

Apart from the driver line itself: the plan carries the driver line's address to every task
(:mod:`etlstage.spark.tasks.plan` imports the driver line), and these handlers read the plan.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from etlstage.errors import PipelineError
from etlstage.spark.driver_line import COUNT_NAME, DriverLine, Handler, keep_once, read_piece, relative

if TYPE_CHECKING:
    from etlstage.config.model import StageConfig
    from etlstage.spark.tasks.plan import Plan


def native_dir(plan: Plan, stage: StageConfig) -> Path:
    """A native stage's own folder on the driver (its ``ctx.checkpoint``)."""
    from etlstage.spark.checkpoint import own_path

    return own_path(plan.config, "native", stage.name)


def open_driver_line(plan: Plan, bind: str, advertise: str) -> DriverLine:
    """The driver line of ``plan``'s run: what each request does in the driver's folders."""
    from etlstage.spark.checkpoint import owner_only, private_folder
    from etlstage.spark.tasks.tally import Tally, tally_dir, write
    from etlstage.state.store import StateStore

    config = plan.config

    def deadletter(header: dict[str, Any], payload: bytes) -> tuple[dict[str, Any], bytes]:
        store = StateStore(config.state_dir, config.source)
        try:
            args = (str(header["stage"]), int(header["attempts"]), str(header["error"]), payload)
            put = store.set_aside if header.get("log") else store.add_deadletter
            ident = put(*args, int(header["messages"]), int(header["eom"]))
        finally:
            store.close()
        return {"id": ident}, b""

    def tally(header: dict[str, Any], payload: bytes) -> tuple[dict[str, Any], bytes]:
        write(tally_dir(config, plan.run_id), Tally.from_json(payload.decode()), str(header["owner"]))
        return {}, b""

    def count(header: dict[str, Any], payload: bytes) -> tuple[dict[str, Any], bytes]:
        name = str(header["name"])
        if not COUNT_NAME.match(name):
            raise PipelineError(f"not a window count's name: {name!r}")
        folder = private_folder(plan.counts_dir(config.stage(str(header["stage"]))))
        with open(folder / name, "w", opener=owner_only) as f:
            f.write(str(int(header["n"])))
        return {}, b""

    def spool(header: dict[str, Any], payload: bytes) -> tuple[dict[str, Any], bytes]:
        return read_piece(plan.spool_dir(config.stage(str(header["stage"]))), header)

    def once(header: dict[str, Any], payload: bytes) -> tuple[dict[str, Any], bytes]:
        path = native_dir(plan, config.stage(str(header["stage"]))) / relative(str(header["name"]))
        if header.get("peek"):
            return ({"found": True}, path.read_bytes()) if path.exists() else ({"found": False}, b"")
        return {"found": True}, keep_once(path, payload)

    handlers: dict[str, Handler] = {
        "deadletter": deadletter,
        "tally": tally,
        "count": count,
        "spool": spool,
        "once": once,
    }
    return DriverLine(handlers, bind, advertise, max_payload=largest_payload(config.stages))


def largest_payload(stages: list[StageConfig]) -> int:
    """The most a request may carry: a dead letter is a job's messages with their markers,
    a batch of at most ``batch_bytes`` and one more message (a margin of twice that)."""
    return max([2 * (s.batch_bytes + s.max_message_bytes) + (1 << 20) for s in stages] or [64 << 20])


__all__ = ["largest_payload", "native_dir", "open_driver_line"]
