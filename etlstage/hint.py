"""The commands the project suggests in its messages: pasteable as printed, from where the user is."""

from __future__ import annotations

import shlex


def command(*argv: str) -> str:
    """``etlstage ARGV…`` quoted for a POSIX shell: ``command("deadletter", "show", "my pipe.yaml", "1")``.

    >>> command("deadletter", "show", "stages.yaml", "3")
    'etlstage deadletter show stages.yaml 3'
    >>> command("status", "my pipe.yaml")
    "etlstage status 'my pipe.yaml'"
    """
    return " ".join(["etlstage", *(shlex.quote(a) for a in argv)])
