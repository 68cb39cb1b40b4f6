"""The Python that Spark's Python processes run on a local master: this one, importing
pyspark from its installed, compiled package instead of Spark's source zip.

Spark puts ``$SPARK_HOME/python/lib/pyspark.zip`` (and py4j's zip) first on every Python
process's ``PYTHONPATH``.  A zip holds no bytecode Python can reuse, so each of them
compiles pyspark from source: about 0.6 s of CPU per process, and a Spark-engine run
starts seven of them one after the other (data-source lookup, read planning, the streaming
source and sink runners, the writer, the task workers) before its first record is written.
When ``SPARK_HOME`` is the installed pyspark package itself (a ``pip install``), the zip
holds the same code as the package beside it, so the processes may import that instead.

Spark gives its processes one executable and no arguments (``PYSPARK_PYTHON``), so the
engine writes a two-line launcher that takes the zips off the front of ``PYTHONPATH`` and
runs this Python.  Only for ``local`` masters: a cluster's executors run on machines where
neither the launcher nor this Python need exist.  A user's own ``PYSPARK_PYTHON`` is kept.
Figures: docs/performance.md, "Start-up: the floor under it".
"""

from __future__ import annotations

import logging
import os
import shlex
import sys
from pathlib import Path

from etlstage.state.store import ensure_private_dir

log = logging.getLogger("etlstage.spark")

LAUNCHER = "python-launcher"


def bundled_zips() -> list[str]:
    """The zips Spark puts first on its processes' path that hold what is installed here
    anyway: pyspark's own when ``SPARK_HOME`` is the installed package, then py4j's when
    the installed py4j is the zip's version.  Empty when Spark's home is elsewhere."""
    import pyspark

    installed = os.path.dirname(os.path.abspath(pyspark.__file__))
    home = os.environ.get("SPARK_HOME")
    if home is not None and os.path.realpath(home) != os.path.realpath(installed):
        return []  # a Spark distribution of its own: its zip may be another version
    lib = os.path.join(installed, "python", "lib")
    zips = [os.path.join(lib, "pyspark.zip")]
    try:
        from importlib.metadata import version

        py4j = os.path.join(lib, f"py4j-{version('py4j')}-src.zip")
        if os.path.exists(py4j):
            zips.append(py4j)
    except Exception:  # py4j not installed as a package: its zip stays
        pass
    return zips


def launcher_text(python: str, zips: list[str]) -> str:
    """A POSIX shell script: each zip, in order, taken off the front of ``PYTHONPATH``
    (Spark's order; anything else is left as it is), then ``python`` with the arguments.

    >>> print(launcher_text("/v/bin/python", ["/p/lib/pyspark.zip"]))  # doctest: +NORMALIZE_WHITESPACE
    #!/bin/sh
    # written by etlstage (etlstage/spark/setup/worker_python.py): pyspark from its installed package
    case $PYTHONPATH in /p/lib/pyspark.zip:*) PYTHONPATH=${PYTHONPATH#/p/lib/pyspark.zip:} ;;
      /p/lib/pyspark.zip) PYTHONPATH= ;; esac
    export PYTHONPATH
    exec /v/bin/python "$@"
    """
    lines = [
        "#!/bin/sh",
        "# written by etlstage (etlstage/spark/setup/worker_python.py): pyspark from its installed package",
    ]
    for z in zips:
        q = shlex.quote(z)
        lines.append(f"case $PYTHONPATH in {q}:*) PYTHONPATH=${{PYTHONPATH#{q}:}} ;;\n  {q}) PYTHONPATH= ;; esac")
    lines += ["export PYTHONPATH", f'exec {shlex.quote(python)} "$@"']
    return "\n".join(lines) + "\n"


def spark_python(master: str, state_dir: str | Path) -> str | None:
    """The executable for ``PYSPARK_PYTHON`` on ``master``: a launcher written into the
    pipeline's (owner-only) state folder, or None to leave Spark's default to the caller."""
    if not master.startswith("local") or "PYSPARK_PYTHON" in os.environ:
        return None
    zips = bundled_zips()
    if not zips:
        return None
    folder = ensure_private_dir(Path(state_dir) / "spark")  # a StateError names what is wrong
    path = folder / LAUNCHER
    part = folder / f".{LAUNCHER}.{os.getpid()}"
    try:
        fd = os.open(part, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o700)
        with os.fdopen(fd, "w") as f:
            f.write(launcher_text(sys.executable, zips))
        os.replace(part, path)  # whole or not at all: a task may start it at any moment
    except OSError as exc:  # only a slower start-up is lost
        log.warning("Spark's Python processes import pyspark from its zip (slower): %s: %s", path, exc.strerror)
        return None
    return str(path)


__all__ = ["bundled_zips", "launcher_text", "spark_python"]
