"""The most telling line of a worker's stderr: what a failure's headline quotes.

A crash's last line is seldom its cause: Node ends with ``Node.js v20.20.2``, Java with a
stack frame, Go with ``exit status 2``.  The cause is the exception's own line
(``ModuleNotFoundError: …``, ``Error: Cannot find module …``, ``Caused by: …``), a
``panic:``, an ``error:``.  Both engines and ``check-worker`` pick it here.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from etlstage.errors import PipelineError, WorkerError, WorkerGone, escape_bytes
from etlstage.redact import redact_argv

# lines that never tell the cause: stack frames, version banners, the source line and its caret
_NOISE = re.compile(
    r"""^(?:
        at\s.*                                  # a JavaScript or Java stack frame
      | \.\.\.\s\d+\smore                       # Java's elided frames
      | File\s".*                               # a Python frame
      | Traceback\s\(most\srecent\scall\slast\):
      | During\shandling\sof\sthe\sabove\sexception.*
      | The\sabove\sexception\swas\sthe\sdirect\scause.*
      | Node\.js\sv[\d.]+
      | node:internal/\S+
      | Require\sstack:
      | -\s/\S.*                                # Node's require stack entry
      | throw\s\w+;?
      | [\^~\s]*\^[\^~\s]*                      # a caret under the failing source
      | [{}\[\]()]+,?
      | \w+:\s'.*',?                            # a Node error's fields (code: 'MODULE_NOT_FOUND')
      | goroutine\s\d+\s\[.*
      | exit\sstatus\s\d+
      | note:\srun\swith\s`RUST_BACKTRACE.*
      | stack\sbacktrace:
    )$""",
    re.VERBOSE,
)

# an exception's own line, a panic, a fatal error, a missing thing
_CAUSE = re.compile(
    r"""^(?:
        (?:Caused\sby:\s|Exception\sin\sthread\s"[^"]*"\s)?(?:[\w$]+\.)*[\w$]*(?:Error|Exception|Exit|Interrupt|Fault)\b.*
      | panic:.*
      | .*\bpanicked\sat\b.*
      | (?:fatal|FATAL|Fatal)\b.*
      | (?:error|ERROR)(?:\[\w+\])?:.*
    )$""",
    re.VERBOSE,
)
_MISSING = re.compile(r"[Cc]annot find|[Cc]ould not find|[Nn]o such file|not found|[Pp]ermission denied|[Nn]o module")
_SAYS_ERROR = re.compile(r"\b(?:[Ee]rror|ERROR|FATAL|CRITICAL|[Ee]xception)\b")


def _score(line: str) -> int:
    if not line or _NOISE.match(line):
        return 0
    if _CAUSE.match(line) or _MISSING.search(line):
        return 3
    return 2 if _SAYS_ERROR.search(line) else 1


def telling_line(lines: Iterable[str]) -> str | None:
    """The last of the most telling lines, or None when stderr said nothing that tells.

    >>> telling_line(["Error: Cannot find module 'x'", "    at Module._load (node:1:2)", "", "Node.js v20.20.2"])
    "Error: Cannot find module 'x'"
    >>> telling_line(["Traceback (most recent call last):", '  File "w.py", line 3', "ValueError: bad"])
    'ValueError: bad'
    >>> telling_line(["started", "Node.js v20.1.0"])
    'started'
    >>> telling_line(["", "Node.js v20.1.0"]) is None
    True
    """
    stripped = [line.strip() for line in lines]
    best, best_score = None, 0
    for i, line in enumerate(stripped):
        score = _score(line)
        if score >= best_score and score:
            best, best_score = line, score
            # Rust: "thread 'main' panicked at src/main.rs:2:5:" with the message on the next line
            if line.endswith(":") and "panicked at" in line and i + 1 < len(stripped) and stripped[i + 1]:
                best = f"{line} {stripped[i + 1]}"
    return best


def says_missing(line: str) -> bool:
    """``line`` tells of something missing (a module, a file, a program): not of bad input."""
    return bool(_MISSING.search(line))


def worker_gone(headline: str, stderr: Iterable[str], context: list[str]) -> WorkerGone:
    """The worker went away: ``headline`` with the telling line of ``stderr`` after it (and
    kept as the error's ``cause``), so that the log, the status page and ``last_errors``
    say why.  Both engines report a worker's end here."""
    said = telling_line(stderr)
    error = WorkerGone(f"{headline}: {said}" if said else headline, context)
    error.cause = said
    return error


def broken_command(label: str, stderr: Iterable[str], error: WorkerError) -> PipelineError:
    """The worker went away before answering its first request: a broken command (a
    missing script, a bad option), not a bad message (:func:`etlstage.conversation.policy.broken_command`
    decides) — what it said is the headline.  One text for both engines."""
    headline = telling_line(stderr) or "(it wrote nothing to stderr)"
    failure = PipelineError(
        f"{label} exited before its first request: {headline}\n"
        f"The stage stops at once (restarting it would fail the same way).\nCause: {error}"
    )
    failure.__cause__ = error
    return failure


def report_context(
    stage: str, argv: Sequence[str], pid: int | None, status: str, snippet: bytes, stderr: Sequence[str]
) -> list[str]:
    """The lines under a worker's error, the same on both engines: the stage (``stage``:
    its description), the command (secrets redacted), pid, exit status, the bytes at
    fault escaped, and the last lines of its stderr."""
    lines = [f"stage: {stage}", f"command: {redact_argv(list(argv))!r}", f"pid: {pid}", f"exit status: {status}"]
    if snippet:
        lines.append(f"bytes: {escape_bytes(snippet)}")
    if stderr:
        lines.append("stderr (last lines):")
        lines.extend(f"  | {t}" for t in list(stderr)[-10:])
    else:
        lines.append("stderr: (nothing)")
    return lines
