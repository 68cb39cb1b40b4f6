"""Stock pipeline latency: from a record's PutRecords to its row published by the Spark loader,
at a steady producer rate, with and without the extractor's read-ahead, in one run.

    python bench/stock_latency.py [--rate 1000] [--seconds 60] [--warmup 10]

The stock stages.yaml's stages (as they are) run endlessly (`etlstage run`, no ``--once``)
against a Kinesis emulator on loopback.  A producer puts ~1 KB valid RDSS messages at
``--rate`` records/s (PutRecords every 50 ms) and notes each one's time before the call; a
watcher lists the dataset's ``valid/`` table every 50 ms and notes when each messageId's
file appears there (the loader publishes a batch's files by rename, then marks it
committed and acknowledges it).  Latency = appearance - put.  Records put during the
first ``--warmup`` seconds after the pipeline loaded its first row are not counted (JIT
warm-up); then ``--seconds`` of records are measured.  The baseline row runs the same
pipeline with ``--no-read-ahead`` on the extractor: it reads only once a request came.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

import pyarrow.parquet as pq
from etlstage_workers.kinesis.emulator import FAKE_CREDENTIALS
from stock_pipeline import PY, messages, pipeline, stock_stages, stream_of

TICK = 0.05  # seconds between PutRecords calls


class Emulator:
    """The emulator as its own process (as a user's Kinesis would be): endpoint on stdout."""

    def __init__(self, stream: str) -> None:
        command = [PY, "-m", "etlstage_workers.kinesis.emulator", "--stream", stream, "--shards", "2"]
        self.proc = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        self.url = self.proc.stdout.readline().strip()
        if not self.url.startswith("http"):
            raise SystemExit(f"the emulator did not start (said {self.url!r})")
        client, deadline = self.client(), time.monotonic() + 30
        while True:  # it prints its endpoint before it creates the stream
            try:
                if (
                    client.describe_stream_summary(StreamName=stream)["StreamDescriptionSummary"]["StreamStatus"]
                    == "ACTIVE"
                ):
                    break
            except client.exceptions.ResourceNotFoundException:
                pass
            if time.monotonic() > deadline:
                raise SystemExit(f"stream {stream!r} not ACTIVE within 30 s")
            time.sleep(0.1)

    def client(self) -> Any:
        import boto3

        return boto3.client(
            "kinesis",
            endpoint_url=self.url,
            region_name="us-east-1",
            aws_access_key_id=FAKE_CREDENTIALS["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=FAKE_CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
        )

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(30)


class Watcher(threading.Thread):
    """Notes when each messageId first shows in a published file of ``table``."""

    def __init__(self, table: Path) -> None:
        super().__init__(daemon=True)
        self.table = table
        self.seen: dict[str, float] = {}
        self.stop = threading.Event()
        self._files: set[str] = set()

    def run(self) -> None:
        while not self.stop.wait(TICK):
            now = time.time()
            for path in sorted(self.table.rglob("*.parquet")) if self.table.is_dir() else []:
                if path.name in self._files:
                    continue
                self._files.add(path.name)
                for message_id in pq.read_table(path, columns=["messageId"]).column(0).to_pylist():
                    self.seen.setdefault(message_id, now)


def produce(client: Any, stream: str, records: list[bytes], rate: int, put_at: dict[str, float]) -> None:
    """PutRecords of ``rate * TICK`` records every TICK seconds, on a fixed schedule."""
    import orjson

    per_tick = max(1, round(rate * TICK))
    start = time.monotonic()
    for n, i in enumerate(range(0, len(records), per_tick)):
        delay = start + n * TICK - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        chunk = records[i : i + per_tick]
        now = time.time()
        for data in chunk:
            put_at[orjson.loads(data)["messageHeader"]["messageId"]] = now
        entries = [{"Data": data, "PartitionKey": str(i + k)} for k, data in enumerate(chunk)]
        reply = client.put_records(StreamName=stream, Records=entries)
        if reply.get("FailedRecordCount"):
            raise SystemExit(f"PutRecords: {reply['FailedRecordCount']} records failed")


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def measure(label: str, read_ahead: bool, args: argparse.Namespace, records: list[bytes]) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="etlstage-latency-"))
    stages = stock_stages()
    kinesis, rdss, spark = stages["kinesis"], stages["rdss"], stages["spark"]
    stream = stream_of(kinesis)
    emulator = Emulator(stream)
    kinesis["command"] = [*kinesis["command"], "--endpoint-url", emulator.url]
    if not read_ahead:
        kinesis["command"].append("--no-read-ahead")
    (work / "stages.yaml").write_text(pipeline(kinesis, rdss, spark))
    env = dict(os.environ, **FAKE_CREDENTIALS)
    watcher = Watcher(work / "out" / "valid")
    counted: dict[str, float] = {}
    with open(work / "run.log", "wb") as log:
        run = subprocess.Popen(
            [PY, "-m", "etlstage.cli", "run", "stages.yaml", "--no-progress"], cwd=work, stderr=log, stdout=log, env=env
        )
        watcher.start()
        client = emulator.client()
        try:
            warm, measured = records[: args.rate * 2], records[args.rate * 2 :]
            produce(client, stream, warm, args.rate, {})
            deadline = time.monotonic() + 300
            while not watcher.seen:  # until a first row shows: Spark is up
                if run.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit(f"{label}: the pipeline loaded nothing; log in {work / 'run.log'}")
                time.sleep(1)
                produce(client, stream, warm[: args.rate], args.rate, {})  # keep the stream moving meanwhile
            steady = args.rate * args.warmup
            produce(client, stream, measured[:steady], args.rate, {})
            produce(client, stream, measured[steady:], args.rate, counted)
            deadline = time.monotonic() + 120
            while any(k not in watcher.seen for k in counted) and time.monotonic() < deadline:
                time.sleep(0.2)
        finally:
            watcher.stop.set()
            run.send_signal(signal.SIGINT)  # a graceful stop
            try:
                run.wait(120)
            except subprocess.TimeoutExpired:
                run.kill()
            emulator.stop()
    latencies = [watcher.seen[k] - t for k, t in counted.items() if k in watcher.seen]
    missing = len(counted) - len(latencies)
    shutil.rmtree(work, ignore_errors=True)
    return {
        "label": label,
        "records": len(counted),
        "missing": missing,
        "p50": percentile(latencies, 0.50),
        "p99": percentile(latencies, 0.99),
        "max": max(latencies),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rate", type=int, default=1000, help="records per second put by the producer")
    ap.add_argument("--seconds", type=int, default=60, help="seconds of records measured")
    ap.add_argument("--warmup", type=int, default=10, help="seconds of records not counted once rows show")
    args = ap.parse_args()
    records = messages(args.rate * (args.seconds + args.warmup + 2), large=False, seed=11)
    rows = [
        measure("without read-ahead (baseline)", False, args, records),
        measure("stock stages.yaml (read-ahead)", True, args, records),
    ]
    print(f"\n{args.rate} records/s of ~1 KB for {args.seconds} s, put -> row published (seconds)")
    print(f"{'pipeline':<34}{'records':>9}{'p50':>8}{'p99':>8}{'max':>8}{'missing':>9}")
    for r in rows:
        print(f"{r['label']:<34}{r['records']:>9,}{r['p50']:8.2f}{r['p99']:8.2f}{r['max']:8.2f}{r['missing']:>9}")


if __name__ == "__main__":
    main()
