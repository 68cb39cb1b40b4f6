"""``etlstage-spark-load``: command line, start-up checks, then the SDK's main loop."""

from __future__ import annotations

import argparse
import logging
import os
import sys

from etlstage_workers.spark.config import COLUMN_TYPES, FORMATS, LoaderConfig, parse_column

from etlstage.errors import ConfigError, EtlstageError

log = logging.getLogger("etlstage.spark")

EPILOG = """\
examples:
  etlstage-spark-load --output /data/events --columns id=/id kind=/type amount:double=/amount --key /id
  etlstage-spark-load --rdss --output /data/rdss --format parquet --partition-by messageType
  etlstage-spark-load --rdss --format delta --output s3a://lake/rdss --dynamodb-log-table delta_log
  etlstage-spark-load --rdss --output /shared/rdss --master spark://10.0.0.5:7077 --conf spark.executor.memory=2g
"""


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="etlstage-spark-load",
        description="etlstage L-worker: appends each batch to a dataset with Spark, idempotently by key.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--output",
        required=True,
        help="where the tables go: delta: a path or a file system URI (s3a://bucket/path, hdfs://...); "
        "other formats: a local path or a shared mount seen by executors",
    )
    p.add_argument(
        "--format",
        default="parquet",
        choices=FORMATS,
        help="delta (Delta tables, merged by key) or plain files (default parquet)",
    )
    p.add_argument(
        "--columns",
        nargs="+",
        default=[],
        metavar="NAME[:TYPE]=/POINTER",
        help=f"JSON mode: output columns from JSON pointers; TYPE one of {', '.join(COLUMN_TYPES)}",
    )
    p.add_argument("--rdss", action="store_true", help="RDSS messages: fixed columns, tables valid/ invalid/ error/")
    p.add_argument(
        "--key",
        default=None,
        metavar="/POINTER",
        help="idempotence key (default /messageHeader/messageId with --rdss; else the message's SHA-256)",
    )
    p.add_argument(
        "--dynamodb-log-table",
        default="",
        metavar="NAME",
        help="--format delta on s3a:// or s3://: commit through Delta's DynamoDB log store with this table "
        "(created when missing), so that several instances or clusters may write one table; needed with "
        "instances > 1",
    )
    p.add_argument(
        "--dynamodb-region",
        default="",
        metavar="REGION",
        help="the region of the --dynamodb-log-table table (default: Delta's, us-east-1)",
    )
    p.add_argument("--partition-by", nargs="+", default=[], metavar="COLUMN", help="partition the output by columns")
    p.add_argument("--master", default="local[*]", help="Spark master: local[*], spark://host:port, sc://host:port, …")
    p.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE", help="Spark setting (repeatable)")
    p.add_argument(
        "--state-dir",
        default=os.environ.get("ETLSTAGE_STATE_DIR", ""),
        help="where the key index lives (default $ETLSTAGE_STATE_DIR, else <output>/_etlstage_state)",
    )
    p.add_argument("--app-name", default="etlstage-spark-load", help="Spark application name prefix")
    p.add_argument("--connect-timeout", type=float, default=10.0, help="seconds to reach a spark:// or sc:// master")
    p.add_argument(
        "--claim-timeout",
        type=float,
        default=120.0,
        help="seconds to wait for keys held by another instance's unfinished batch",
    )
    p.add_argument("--spark-log-level", default="WARN", help="Spark's log level (its logs go to stderr)")
    p.add_argument(
        "--log-format",
        default=os.environ.get("ETLSTAGE_LOG_FORMAT") or "text",
        choices=("text", "json", "syslog"),
        help="log format on stderr (default $ETLSTAGE_LOG_FORMAT)",
    )
    p.add_argument(
        "--syslog-address",
        default=os.environ.get("ETLSTAGE_SYSLOG_ADDRESS"),
        help="udp://host:port, tcp://host:port or a socket path, for --log-format syslog",
    )
    return p


def config_from_args(args: argparse.Namespace) -> LoaderConfig:
    problems = []
    columns = []
    for spec in args.columns:
        try:
            columns.append(parse_column(spec))
        except ValueError as exc:
            problems.append(f"--columns: {exc}")
    conf = {}
    for item in args.conf:
        key, sep, value = item.partition("=")
        if not sep or not key:
            problems.append(f"--conf {item!r}: expected key=value, e.g. spark.executor.memory=2g")
        else:
            conf[key.strip()] = value
    if problems:
        raise ConfigError(problems, "etlstage-spark-load")
    partition_by = tuple(c for item in args.partition_by for c in item.split(",") if c)
    return LoaderConfig(
        output=args.output,
        format=args.format,
        columns=tuple(columns),
        rdss=args.rdss,
        key=args.key,
        partition_by=partition_by,
        master=args.master,
        conf=conf,
        state_dir=args.state_dir,
        app_name=args.app_name,
        connect_timeout=args.connect_timeout,
        claim_timeout=args.claim_timeout,
        spark_log_level=args.spark_log_level,
        log_table=args.dynamodb_log_table,
        log_table_region=args.dynamodb_region,
    ).check()


def run(argv: list[str] | None = None) -> None:
    from etlstage_workers.spark.loader import SparkLoader
    from etlstage_workers.spark.session import SparkStartError

    from etlstage.logs import setup_logging
    from etlstage.worker import main

    args = build_parser().parse_args(argv)
    os.environ["ETLSTAGE_LOG_FORMAT"] = args.log_format  # main() sets logging up again from these
    if args.syslog_address:
        os.environ["ETLSTAGE_SYSLOG_ADDRESS"] = args.syslog_address
    setup_logging("etlstage-spark-load", args.log_format, syslog_address=args.syslog_address)
    try:
        config = config_from_args(args)
    except ConfigError as exc:
        log.error("%s", exc)
        sys.exit(exc.exit_code)
    try:
        main(SparkLoader(config), kind="L", app="etlstage-spark-load")
    except SparkStartError as exc:
        log.error("Spark cannot start: %s", exc)
        sys.exit(exc.exit_code)
    except EtlstageError as exc:  # a message it cannot load, keys held by another instance
        log.error("batch not loaded (nothing acknowledged): %s", exc)
        sys.exit(exc.exit_code)
    except Exception:  # e.g. a Spark job failed: report it, exit non-zero; no EOP was sent
        log.exception("batch not loaded (nothing acknowledged; the batch's claim was released)")
        sys.exit(1)
