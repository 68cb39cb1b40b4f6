"""Files a worker writes that survive a crash: ``write_durably`` (whole or not at all, and
on disk before it returns), ``fsync_path`` (a file, or a folder's entries after a rename).

The public name of :mod:`etlstage.state.durable`, the one implementation (its docstring
has an example).
"""

from etlstage.state.durable import fsync_path, write_durably

__all__ = ["fsync_path", "write_durably"]
