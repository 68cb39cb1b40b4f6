"""SQLite for a worker that keeps its state in it, opened the way the supervisor's own
store is: ``connect`` (autocommit, WAL, a schema applied in one transaction) and
``immediate`` (a write transaction that takes the write lock up front, so that it waits
for another writer instead of deadlocking against it).

The public name of :mod:`etlstage.state.sqlite`, the one implementation (its docstring
has an example).
"""

from etlstage.state.sqlite import connect, immediate

__all__ = ["connect", "immediate"]
