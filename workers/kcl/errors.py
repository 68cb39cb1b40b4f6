"""What can go wrong with an MLD child: it exits, it hangs, or it breaks the protocol.

All three end the adapter with a non-zero exit status and a one-line cause on stderr,
so the supervisor applies the stage's failure policy (restart and replay, dead letter).
"""

from __future__ import annotations

from etlstage.errors import EtlstageError, WorkerError, WorkerGone, WorkerTimeout


class ChildError(WorkerError):
    """Base of the MLD child's failures."""


class ChildExited(ChildError, WorkerGone):
    """The child exited (or closed its stdout) while the adapter waited for an answer."""


class ChildTimeout(ChildError, WorkerTimeout):
    """The child did not answer within the time limit."""


class ChildProtocolError(ChildError):
    """The child answered with the wrong ``responseFor`` (or an unusable status line)."""


class InputError(EtlstageError):
    """An input message looks like a Kinesis envelope but one of its fields is unusable."""
