"""A worker process's figures (kit.transport): its memory and CPU while it runs, its CPU
seconds for /metrics, measured over the process and its children."""

from __future__ import annotations

import asyncio
import os
import sys
import time
from pathlib import Path

from etlstage.kit.transport import ProcessTransport

# burns CPU for about 0.3 s, then waits for its stdin to close
BUSY = "import sys, time\nend = time.process_time() + 0.3\nwhile time.process_time() < end: pass\nsys.stdin.read()"


def test_a_running_worker_has_memory_and_cpu_seconds(tmp_path: Path) -> None:
    async def scenario() -> tuple[tuple[int, float] | None, float | None]:
        t = await ProcessTransport.spawn([sys.executable, "-c", BUSY], dict(os.environ), str(tmp_path), "busy")
        try:
            deadline = time.monotonic() + 20
            while (t.cpu_seconds() or 0.0) < 0.25:  # the CPU it burns shows, within a bounded wait
                assert time.monotonic() < deadline, f"cpu seconds stayed {t.cpu_seconds()}"
                await asyncio.sleep(0.05)
            return t.resources(), t.cpu_seconds()
        finally:
            t.kill()
            await t.stop(1, 1)

    used, seconds = asyncio.run(scenario())
    assert used is not None and used[0] > 1_000_000  # a Python interpreter's resident memory
    assert seconds is not None and seconds >= 0.25
