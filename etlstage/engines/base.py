"""What ``etlstage`` (:mod:`etlstage.cli`) needs of an engine, whichever it is.

An engine runs a pipeline, shows its state for ``etlstage status`` and says what it
supports; the commands call these and never ask which engine they hold. A capability
one engine lacks is a member here (a flag and the words that refuse it), not a test of
the engine's name in a command.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, BinaryIO, NamedTuple, Protocol, runtime_checkable

from etlstage.config.model import PipelineConfig

if TYPE_CHECKING:
    from etlstage.observe.export import RunExport

# attach(on) starts something beside a run (the endpoints, the metrics export) given the
# engine's live object (the supervisor's Pipeline, the Spark driver's counters) and returns
# the function that stops it
Attach = Callable[[Any], Callable[[], None]]


class Tap(NamedTuple):
    """A connection to a running pipeline's tap on one stage."""

    offered: str  # what the stage's messages are, in words (``etlstage tap`` says it first)
    stream: BinaryIO  # closed when the reader is done
    documents: Iterator[dict[str, object]]  # {"message": ...}, {"dropped": n}, {"end": why}


@dataclass(frozen=True)
class RunOptions:
    """How ``etlstage run`` runs a pipeline, whichever the engine."""

    once: bool  # to the end of the input, then stop
    progress: bool  # the live progress table
    env: dict[str, str]  # what every worker is given besides its own (log settings)
    previous_engine: str  # the engine that ran the pipeline last ("" if none)
    # the metrics export (--metrics-file, --pushgateway); the status page and metrics are
    # served on config.http when it is set
    export: RunExport | None = None


@runtime_checkable
class Engine(Protocol):
    kind: str  # its name in stages.yaml's engine.kind and --engine
    supports_tap: bool  # whether ``etlstage tap`` can show a stage's messages (tap_refusal says why not)

    def prepare(self, config: PipelineConfig) -> None:
        """What must happen before the pipeline's state is claimed, before anything starts."""

    def run(self, config: PipelineConfig, options: RunOptions) -> int:
        """Run the pipeline to its end (``options.once``) or until stopped; its exit code."""
        ...

    def status(self, config: PipelineConfig, *, as_json: bool) -> Callable[[], str]:
        """The function that renders ``etlstage status`` (text, or JSON with ``as_json``) each time
        it is called; what keeps it from rendering at all (no state yet) is raised here."""
        ...

    def tap_refusal(self, config: PipelineConfig) -> str:
        """Why ``etlstage tap`` has nothing to show on this engine ("" when it supports it)."""
        ...

    def open_tap(self, config: PipelineConfig, stage: str) -> Tap:
        """The running pipeline's tap on ``stage`` (only when ``supports_tap``)."""
        ...


def together(attaching: list[Attach]) -> Attach:
    """One attach of several (the endpoints, the metrics export); its stop stops them all, last first."""

    def attach(on: Any) -> Callable[[], None]:
        stops: list[Callable[[], None]] = []
        try:
            for start in attaching:
                stops.append(start(on))
        except BaseException:
            for stop in reversed(stops):
                stop()
            raise

        def stop_all() -> None:
            for stop in reversed(stops):
                stop()

        return stop_all

    return attach
