"""Records/s through a pass-through processor speaking the KCL MultiLangDaemon protocol
(behind etlstage-kcl-adapter: JSON + base64 per record) versus the same pass-through as a
native marker-protocol worker — one run, side by side, same input, same batches.

    python bench/kcl_vs_marker.py [--records 200000] [--size 100] [--batch 500]

Each row is one worker process (tree) fed the whole input as supervisor-driven batches
and timed until it has answered every batch and exited.  The amazon_kclpy sdist is
fetched like the tests do (tests/support/kcl.py).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HERE = ROOT / "bench" / "kcl"
sys.path.insert(0, str(ROOT))


def make_input(records: int, size: int, batch: int) -> bytes:
    body = b"x" * max(0, size - 12)
    messages = [b"%011d " % i + body for i in range(records)]
    out = []
    for i in range(0, records, batch):
        out.append(b"\n".join(messages[i : i + batch]) + b"\n\x17")
    return b"".join(out)


def run(argv: list[str], data: bytes, env: dict[str, str], batches: int) -> float:
    started = time.perf_counter()
    done = subprocess.run(argv, input=data, env=env, capture_output=True, check=False, cwd=ROOT)
    elapsed = time.perf_counter() - started
    if done.returncode != 0 or done.stdout.count(b"\x00") != batches:
        raise SystemExit(f"{argv} failed ({done.returncode}): {done.stderr.decode()[-2000:]}")
    return elapsed


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--records", type=int, default=200_000)
    p.add_argument("--size", type=int, default=100, help="bytes per message")
    p.add_argument("--batch", type=int, default=500)
    a = p.parse_args()

    from tests.support.kcl import kclpy_dir

    kclpy = kclpy_dir()
    data = make_input(a.records, a.size, a.batch)
    batches = -(-a.records // a.batch)
    state = tempfile.mkdtemp(prefix="kcl-bench-")
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join([str(ROOT), str(kclpy)]),
        ETLSTAGE_STAGE="bench",
        ETLSTAGE_TYPE="T",
        ETLSTAGE_MODE="batch",
        ETLSTAGE_BATCH_SIZE=str(a.batch),
        ETLSTAGE_BATCH_DRIVER="supervisor",
        ETLSTAGE_STATE_DIR=state,
        ETLSTAGE_LOG_LEVEL="WARNING",
    )
    py, adapter = sys.executable, [sys.executable, "-m", "etlstage_workers.kcl", "--"]
    rows = [
        ("python", "marker protocol (etlstage SDK)", [py, str(HERE / "marker_passthrough.py")]),
        ("python", "MLD: adapter + amazon_kclpy v3", adapter + [py, str(HERE / "kclpy_passthrough.py")]),
        ("node", "marker protocol (plain node)", ["node", str(HERE / "marker_passthrough.js")]),
        ("node", "MLD: adapter + node MLD child", adapter + ["node", str(HERE / "mld_passthrough.js")]),
    ]
    results = {}
    print(f"{a.records} records of {a.size} bytes, batches of {a.batch}, one run each")
    print(f"{'language':<8} {'worker':<34} {'seconds':>8} {'records/s':>12}")
    for lang, name, argv in rows:
        secs = run(argv, data, env, batches)
        results[(lang, name.startswith("marker"))] = a.records / secs
        print(f"{lang:<8} {name:<34} {secs:8.2f} {a.records / secs:12,.0f}")
    for lang in ("python", "node"):
        print(f"{lang}: marker protocol is {results[(lang, True)] / results[(lang, False)]:.1f}x the MLD throughput")


if __name__ == "__main__":
    main()
