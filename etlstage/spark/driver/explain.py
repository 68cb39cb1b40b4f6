"""What a Spark exception says in etlstage's words: the worker's report inside it."""

from __future__ import annotations

import re


def explain(exc: BaseException) -> str:
    """The etlstage error inside a Spark exception (a worker's report), else its first lines."""
    text = str(exc)
    for marker in (
        "etlstage.errors.PipelineError: ",
        "etlstage.errors.WorkerError: ",
        "etlstage.errors.WorkerGone: ",
        "etlstage.errors.WorkerTimeout: ",
        "etlstage.errors.MarkerInMessage: ",
        "etlstage.errors.ProtocolViolation: ",
    ):
        at = text.find(marker)
        if at >= 0:
            body = text[at + len(marker) :]
            lines = []
            for line in body.splitlines():
                if line.startswith(("\tat ", "at org.", "Traceback", "JVM stacktrace", "=== Streaming Query")) or (
                    "org.apache.spark" in line
                ):
                    break
                line = re.sub(r"(\s*SQLSTATE: \w+)+\s*$", "", line)  # Spark's error classes, appended
                if line:
                    lines.append(line)
            return "\n".join(lines).rstrip()
    return "\n".join(text.strip().splitlines()[:6])


__all__ = ["explain"]
