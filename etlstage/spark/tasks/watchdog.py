"""``python -m etlstage.spark.tasks.watchdog GRACE``: no worker outlives the Python process that started it.

Spark kills its Python workers with SIGKILL (a stopped context, an idle worker, a
cancelled task), so they cannot stop their worker processes themselves.  Each Python
process that starts workers also starts this watchdog, in its own session, and keeps
the write end of its stdin; it writes ``pid start-time`` for every worker it starts.
When that stdin reaches end of file the Python process is gone, and so is the write
end of every worker's stdin: a worker sees "no more work", finishes and exits, as under
the supervisor.  Whatever still runs ``GRACE`` seconds later is killed, with its
children.  ``forget pid`` takes a worker off the list: it was handed over to another
Python process (whose own watchdog now watches it).
"""

from __future__ import annotations

import contextlib
import sys

import psutil


def main(argv: list[str]) -> int:
    grace = float(argv[1]) if len(argv) > 1 else 10.0
    workers: dict[int, psutil.Process] = {}
    for line in sys.stdin:
        with contextlib.suppress(ValueError, psutil.Error):
            first, second = line.split()
            if first == "forget":
                workers.pop(int(second), None)
                continue
            p = psutil.Process(int(first))
            if abs(p.create_time() - float(second)) < 0.01:  # not a recycled pid
                workers[p.pid] = p
    live = [p for p in workers.values() if p.is_running()]
    _, alive = psutil.wait_procs(live, timeout=grace)
    for p in alive:
        with contextlib.suppress(psutil.Error):
            for q in [*p.children(recursive=True), p]:
                with contextlib.suppress(psutil.Error):
                    q.kill()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
