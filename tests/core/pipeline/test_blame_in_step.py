"""A job charged a try after a failure goes to the replacement worker only once the jobs
sent again before it (answered by the failed worker, not yet known to be in step) are
answered again and confirmed: if the replacement fails, the failure is that job's own, and
it alone is charged (policy.in_step_first, set by conversation/recovery.py for both engines).

The loader's first process answers batch A, then dies on batch B with A's answer still
held (B outstanding: no quiet check could confirm A). The replacement gets A again, and
looks, before it answers A, whether B has been written to it already."""

from __future__ import annotations

from collections import Counter

import pytest

from tests.support.engines import Engine

pytestmark = pytest.mark.timeout(300)

# Twenty messages in one write: one micro-batch on Spark, both batches in the inbox at once
# under the supervisor; open a little longer so that nothing ends the input early.
SOURCE = """\
import sys, time
sys.stdout.buffer.write(b"".join(b"%d\\n" % i for i in range(20)))
sys.stdout.buffer.flush()
time.sleep(1)
"""

# Raw protocol (no SDK): its own reads, so that what is written ahead shows.
LOADER = """\
import os, select, sys
from pathlib import Path
flags = Path(sys.argv[1])
eom, eop, eob = (bytes.fromhex(os.environ[k]) for k in ("ETLSTAGE_EOM", "ETLSTAGE_EOP", "ETLSTAGE_EOB"))
first = not (flags / "crashed").exists()
second = not first and not (flags / "looked").exists()
buf = b""
batches = 0
def answer(messages):
    global batches
    batches += 1
    if first and batches == 2:
        (flags / "crashed").touch()
        os._exit(9)
    if second and batches == 1:
        ready, _, _ = select.select([0], [], [], 0.5)
        ahead = bool(ready) or bool(buf)
        (flags / "looked").write_text(messages[0].decode() + (" ahead" if ahead else " after"))
    with open("out.txt", "ab") as f:
        f.write(b"".join(m + b"\\n" for m in messages))
    os.write(1, eop)
pending = []
while chunk := os.read(0, 65536):
    buf += chunk
    while buf:
        if buf[:1] == eob:
            buf = buf[1:]
            answer(pending)
            pending = []
            continue
        at = buf.find(eom)
        if at < 0:
            break
        pending.append(buf[:at])
        buf = buf[at + 1 :]
"""


def test_a_job_charged_a_try_waits_until_the_jobs_before_it_are_in_step(engine: Engine) -> None:
    (engine.tmp / "src.py").write_text(SOURCE)
    (engine.tmp / "l.py").write_text(LOADER)
    code, log = engine.run(
        """
stages:
  - {name: src, type: E, command: ["{PY}", "src.py"]}
  - {name: sink, type: L, mode: batch, batch_size: 10, prefetch: 2,
     restart: {max_restarts: 3, backoff: 0.05}, command: ["{PY}", "l.py", "{FLAGS}"]}
"""
    )
    assert code == 0, log[-3000:]
    looked = (engine.tmp / "flags" / "looked").read_text().split()
    # the replacement's first batch was A, taken back from the failed worker: the case arose
    assert looked[0] == "0", f"the replacement began with message {looked[0]}, not batch A's first\n{log[-3000:]}"
    assert looked[1] == "after", (
        "batch B (charged for the failure) was written to the replacement before batch A, sent "
        f"again ahead of it, was answered and confirmed\n{log[-3000:]}"
    )
    got = Counter(engine.lines("out.txt"))
    assert sorted(got, key=int) == [str(i) for i in range(20)], got
