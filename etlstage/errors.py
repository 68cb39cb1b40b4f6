"""One small error tree, grouped by phase (docs/architecture.md).

Every message names the bad value and what was expected.  "The worker went away"
(:class:`WorkerGone`: it exited or closed a pipe unasked) is kept apart from a worker we
stopped on purpose, which raises nothing.
"""

from __future__ import annotations


class EtlstageError(Exception):
    """Base of every error etlstage raises on purpose."""

    exit_code = 1


# --- configuration -------------------------------------------------------------------


class ConfigError(EtlstageError):
    """stages.yaml (or a command-line option) is wrong.  Carries every problem found."""

    exit_code = 2

    def __init__(self, problems: list[str], source: str = "") -> None:
        self.problems = list(problems)
        self.source = source
        head = f"{source}: " if source else ""
        if len(self.problems) == 1:
            text = f"{head}{self.problems[0]}"
        else:
            lines = "\n".join(f"  - {p}" for p in self.problems)
            text = f"{head}{len(self.problems)} problems:\n{lines}"
        super().__init__(text)


class MarkerError(ConfigError):
    """A marker value is not a single byte, or two markers share a byte."""

    def __init__(self, problem: str) -> None:
        super().__init__([problem])


# --- protocol ------------------------------------------------------------------------


class ProtocolViolation(EtlstageError):
    """A peer broke the marker protocol (docs/protocol.md).

    ``snippet`` holds an escaped excerpt of the offending bytes; the stage driver adds
    the stage, command, pid, exit status and stderr tail before reporting it.
    """

    def __init__(self, problem: str, snippet: bytes = b"") -> None:
        self.problem = problem
        self.snippet = snippet
        text = problem if not snippet else f"{problem}; bytes seen: {escape_bytes(snippet)}"
        super().__init__(text)


class MarkerInMessage(ProtocolViolation):
    """A message holds a byte that is a marker of the stage it is about to enter."""


class UnaskedReply(ProtocolViolation):
    """The worker answered with nothing outstanding: its replies and the requests no longer
    line up (a stray or repeated EOP, or output written after its last answer)."""


# --- worker processes ----------------------------------------------------------------


class WorkerError(EtlstageError):
    """A worker failed: it crashed, timed out or broke the protocol.

    ``detail`` is the one-line cause; ``context`` lines name stage, command, pid, exit
    status, snippet and stderr tail so the report stands on its own.
    """

    def __init__(self, detail: str, context: list[str] | None = None) -> None:
        self.detail = detail
        self.context = list(context or [])
        self.cause: str | None = None  # the telling line of the worker's stderr, when known
        body = detail if not self.context else detail + "\n" + "\n".join(f"  {c}" for c in self.context)
        super().__init__(body)


class WorkerGone(WorkerError):
    """The worker exited or closed its stdout without being asked to."""


class WorkerTimeout(WorkerError):
    """The worker did not answer within its start-up, request or idle time limit."""


# --- pipeline ------------------------------------------------------------------------


class PipelineError(EtlstageError):
    """The pipeline cannot go on: a stage exhausted its restarts under policy ``fail``."""


class StateError(EtlstageError):
    """The state store under ``state_dir`` cannot be opened or is inconsistent."""

    exit_code = 2


def escape_bytes(data: bytes, limit: int = 80) -> str:
    """Printable, unambiguous rendering of raw protocol bytes, cut to ``limit`` bytes.

    >>> escape_bytes(b"ab\\n\\x00")
    "b'ab\\\\n\\\\x00'"
    """
    shown = data[:limit]
    text = repr(shown)
    if len(data) > limit:
        text += f"... ({len(data)} bytes)"
    return text


EXITED_BETWEEN_CYCLES = "exited between cycles, with nothing written for its next request (its stdin was still open)"


def cycle_cut_short(answered_any: bool) -> str:
    """A cyclic extractor's stdout ended before the EOP of the request it was sent.

    With nothing written for that request, whether it went before or after the request
    reached its pipe is a race the report must not depend on: between cycles, as when its
    end shows before the request is written.  Both engines word it here.
    """
    return "exited in the middle of a cycle (before EOP)" if answered_any else EXITED_BETWEEN_CYCLES


def stdin_broke(exc: BaseException) -> str:
    """A write to a worker's stdin failed: what was noticed, before its exit status is known."""
    return f"stopped reading its stdin ({type(exc).__name__}) — it exited or closed it"


def went_away(what: str, code: int | None, if_exited: str | None = None) -> str:
    """How a worker went away: ``what`` was noticed, unless a signal killed it — then that;
    or ``if_exited`` when it exited on its own (what ``what`` meant, once the status is known).

    An extractor's request that meets a broken pipe found its worker gone between cycles:
    whether the supervisor saw the end of its stdout before writing is a race, and the report
    must not depend on it (both engines pass :data:`EXITED_BETWEEN_CYCLES` there).

    >>> went_away("exited while waiting for work", -9), went_away("stopped reading its stdin", 3)
    ('was killed by signal 9 (SIGKILL) while waiting for work', 'stopped reading its stdin')
    >>> went_away("stopped reading", 0, "exited between cycles"), went_away("stopped reading", None, "exited")
    ('exited between cycles', 'stopped reading')
    """
    if code is not None and code >= 0 and if_exited is not None:
        return if_exited
    if code is None or code >= 0:
        return what
    return f"was {describe_status(code)}" + (what[len("exited") :] if what.startswith("exited") else "")


def describe_status(code: int | None) -> str:
    """A process's exit status in words: ``"3"``, ``"killed by signal 9 (SIGKILL)"``, ``"still running"``.

    >>> describe_status(-9), describe_status(None)
    ('killed by signal 9 (SIGKILL)', 'still running')
    """
    if code is None:
        return "still running"
    if code < 0:
        import signal

        try:
            return f"killed by signal {-code} ({signal.Signals(-code).name})"
        except ValueError:
            return f"killed by signal {-code}"
    return str(code)
