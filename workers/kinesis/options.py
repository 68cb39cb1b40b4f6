"""The extractor's options (command line, or built directly in tests and by the demo)."""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass
from datetime import UTC, datetime

from etlstage_workers.kinesis.shards import INITIAL_POSITIONS
from etlstage_workers.markersafe import DATA_ENCODINGS, ON_MARKER

from etlstage.errors import ConfigError


@dataclass
class Options:
    stream: str
    region: str | None = None
    endpoint_url: str | None = None
    profile: str | None = None
    initial_position: str = "TRIM_HORIZON"
    timestamp: float | None = None
    envelope: bool = False
    data_encoding: str = "auto"
    on_marker: str = "envelope"
    deaggregate: bool = True
    limit: int = 10000
    max_gets_per_second: int = 5
    backoff_base_ms: float = 100.0
    max_retries: int = 10
    shard_sync_interval: float = 30.0
    idle_sleep: float = 0.2
    lag_log_interval: float = 60.0
    parallel: int = 4
    max_records_per_cycle: int = 10000
    max_cycle_seconds: float = 1.0
    read_ahead: bool = True
    state_dir: str | None = None

    def check(self) -> None:
        problems = []
        if not self.stream:
            problems.append("--stream: a stream name or ARN is required")
        if self.initial_position not in INITIAL_POSITIONS:
            choices = ", ".join(INITIAL_POSITIONS)
            problems.append(f"--initial-position {self.initial_position!r}: expected one of {choices}")
        if self.initial_position == "AT_TIMESTAMP" and self.timestamp is None:
            problems.append("--initial-position AT_TIMESTAMP needs --timestamp (ISO 8601 or epoch seconds)")
        if not 1 <= self.limit <= 10000:
            problems.append(f"--limit {self.limit}: expected 1..10000 (the GetRecords maximum)")
        if not 1 <= self.max_gets_per_second <= 5:
            problems.append(f"--max-gets-per-second {self.max_gets_per_second}: expected 1..5 (the Kinesis limit)")
        if not 1 <= self.parallel <= 64:
            problems.append(f"--parallel {self.parallel}: expected 1..64")
        if self.max_records_per_cycle < 1:
            problems.append(f"--max-records-per-cycle {self.max_records_per_cycle}: expected >= 1")
        if not 0 <= self.max_cycle_seconds <= 3600:
            problems.append(f"--max-cycle-seconds {self.max_cycle_seconds:g}: expected 0..3600")
        if self.max_retries < 0:
            problems.append(f"--max-retries {self.max_retries}: expected >= 0")
        if problems:
            raise ConfigError(problems, "etlstage-kinesis")


def parse_timestamp(text: str) -> float:
    """Epoch seconds from ``1700000000``, ``1700000000.5`` or ISO 8601 (``2024-01-01T00:00:00Z``)."""
    try:
        return float(text)
    except ValueError:
        pass
    try:
        dt = datetime.fromisoformat(text.replace("Z", "+00:00"))  # Python 3.10 wants +00:00
    except ValueError:
        problem = f"--timestamp {text!r}: expected epoch seconds or ISO 8601 such as 2024-01-01T00:00:00Z"
        raise ConfigError([problem]) from None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return dt.timestamp()


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="etlstage-kinesis",
        description="etlstage E-worker: reads every shard of a Kinesis stream, checkpoints per shard in "
        "ETLSTAGE_STATE_DIR, commits a cycle's positions when the next request arrives.",
    )
    p.add_argument("--stream", default=os.environ.get("ETLSTAGE_KINESIS_STREAM"), help="stream name or ARN")
    p.add_argument("--region", help="AWS region (default: from the ARN or boto3's configuration)")
    p.add_argument("--endpoint-url", help="Kinesis endpoint, e.g. an emulator on http://127.0.0.1:4568")
    p.add_argument("--profile", help="AWS profile (credentials come only from boto3's normal chain)")
    p.add_argument(
        "--initial-position",
        default="TRIM_HORIZON",
        type=str.upper,
        choices=INITIAL_POSITIONS,
        help="where shards with no checkpoint start (default TRIM_HORIZON)",
    )
    p.add_argument("--timestamp", type=parse_timestamp, help="for AT_TIMESTAMP: epoch seconds or ISO 8601")
    p.add_argument("--envelope", action="store_true", help="emit a JSON envelope per record instead of its data")
    p.add_argument(
        "--data-encoding",
        default="auto",
        choices=DATA_ENCODINGS,
        help="envelope 'data': utf8 text, base64, or auto (utf8 when the bytes are UTF-8)",
    )
    p.add_argument(
        "--on-marker",
        default="envelope",
        choices=ON_MARKER,
        help="a non-JSON record holding a marker byte: base64 envelope, error object, or stop",
    )
    p.add_argument(
        "--no-deaggregate", dest="deaggregate", action="store_false", help="pass KPL aggregated records on as they are"
    )
    p.add_argument("--limit", type=int, default=10000, help="records per GetRecords call (max 10000)")
    p.add_argument("--max-gets-per-second", type=int, default=5, help="GetRecords calls per shard per second (<= 5)")
    p.add_argument("--backoff-base-ms", type=float, default=100.0, help="backoff: sleep 2^n x this before retry n")
    p.add_argument("--max-retries", type=int, default=10, help="retries of a throttled call before failing")
    p.add_argument("--shard-sync-interval", type=float, default=30.0, help="seconds between ListShards calls")
    p.add_argument("--idle-sleep", type=float, default=0.2, help="seconds to pause after a cycle with no records")
    p.add_argument("--lag-log-interval", type=float, default=60.0, help="seconds between MillisBehindLatest logs")
    p.add_argument(
        "--parallel",
        type=int,
        default=4,
        help="shards fetched at once within a cycle (threads); output stays in shard order",
    )
    p.add_argument(
        "--max-records-per-cycle",
        type=int,
        default=10000,
        help="records one cycle (window) holds at most; also the read-ahead buffer's bound (default 10000)",
    )
    p.add_argument(
        "--max-cycle-seconds",
        type=float,
        default=1.0,
        help="a cycle behind a backlog is answered at most this long after the previous one, full or not (default 1.0)",
    )
    p.add_argument(
        "--no-read-ahead",
        dest="read_ahead",
        action="store_false",
        help="read only while a request waits, not while the previous window is loaded",
    )
    p.add_argument("--state-dir", help="checkpoint directory (default ETLSTAGE_STATE_DIR)")
    p.add_argument("--log-format", default=os.environ.get("ETLSTAGE_LOG_FORMAT"), choices=("text", "json", "syslog"))
    p.add_argument("--syslog-address", default=os.environ.get("ETLSTAGE_SYSLOG_ADDRESS"))
    return p


def options_from_args(ns: argparse.Namespace) -> Options:
    fields = Options.__dataclass_fields__
    opts = Options(**{k: v for k, v in vars(ns).items() if k in fields})
    opts.check()
    return opts
