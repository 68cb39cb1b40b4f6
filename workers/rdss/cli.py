"""``etlstage-rdss``: the RDSS validation and reassembly T-worker (default command) and tools.

etlstage-rdss [run] [--spec 3.0.2|4.0.0] [--schema-dir DIR] [--max-bytes N]
              [--sequence-timeout S] [--retention S] [--no-expiry-check] [--state-dir DIR]
              [--log-format text|json|syslog] [--syslog-address ADDR] [--log-messages]
etlstage-rdss demo-data --count N --seed S --out FILE.jsonl --expected FILE.json
etlstage-rdss check FILE.json ...      # validate files, print the verdicts (no state)
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from etlstage_workers.rdss.schemas import DEFAULT_SPEC, SPEC_VERSIONS
from etlstage_workers.rdss.validate import DEFAULT_MAX_BYTES
from etlstage_workers.rdss.worker import DEFAULT_RETENTION_S, DEFAULT_SEQUENCE_TIMEOUT_S, Options

APP = "etlstage-rdss"
COMMANDS = ("run", "demo-data", "check")


def _worker_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--spec", choices=SPEC_VERSIONS, default=DEFAULT_SPEC, help="RDSS Message API version (default %(default)s)"
    )
    p.add_argument(
        "--schema-dir", help="validate against this copy of an official release (its schemas/ and messages/)"
    )
    p.add_argument(
        "--max-bytes",
        type=int,
        default=DEFAULT_MAX_BYTES,
        help="largest serialised message accepted (default %(default)s = 1000 KiB); larger -> GENERR006",
    )
    p.add_argument(
        "--no-expiry-check",
        dest="check_expiry",
        action="store_false",
        help="do not reject messages whose expirationTimestamp has passed (GENERR003)",
    )
    p.add_argument(
        "--sequence-timeout",
        type=float,
        default=DEFAULT_SEQUENCE_TIMEOUT_S,
        help="seconds a multi-message sequence may stay incomplete before its parts go on with GENERR009",
    )
    p.add_argument(
        "--retention",
        type=float,
        default=DEFAULT_RETENTION_S,
        help="seconds the LDR keeps messages and finished sequences (default 168 h, the Kinesis maximum)",
    )
    p.add_argument("--state-dir", help="where the LDR lives (default: ETLSTAGE_STATE_DIR)")
    p.add_argument("--log-format", choices=("text", "json", "syslog"), default=os.environ.get("ETLSTAGE_LOG_FORMAT"))
    p.add_argument(
        "--syslog-address",
        default=os.environ.get("ETLSTAGE_SYSLOG_ADDRESS"),
        help="send syslog lines to /dev/log, udp://host:port or tcp://host:port instead of stderr",
    )
    p.add_argument("--log-level", default=os.environ.get("ETLSTAGE_LOG_LEVEL"))
    p.add_argument("--log-messages", action="store_true", help="log every message received at INFO (the spec's rule)")


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=APP, description="RDSS message validation and reassembly T-worker")
    sub = p.add_subparsers(dest="command")
    _worker_options(sub.add_parser("run", help="run the T-worker (the default)"))
    demo = sub.add_parser("demo-data", help="write realistic RDSS traffic and what must become of it")
    demo.add_argument("--count", type=int, default=1000)
    demo.add_argument("--seed", type=int, default=1)
    demo.add_argument("--out", required=True, help="records, one per line (JSON lines)")
    demo.add_argument("--expected", required=True, help="expected tables and counts (JSON)")
    check = sub.add_parser("check", help="validate message files and print the verdicts")
    _worker_options(check)
    check.add_argument("files", nargs="+")
    return p


def parse_args(argv: list[str]) -> argparse.Namespace:
    """The command line as ``main`` reads it: without a command, ``run`` is meant."""
    argv = list(argv)
    if not argv or argv[0] not in COMMANDS + ("-h", "--help"):
        argv.insert(0, "run")
    return parser().parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if args.command == "demo-data":
        from etlstage_workers.rdss.demo import write_demo

        counts = write_demo(args.count, args.seed, args.out, args.expected)
        print(json.dumps(counts, sort_keys=True), file=sys.stderr)
        return
    options = Options(
        spec=args.spec,
        schema_dir=args.schema_dir,
        max_bytes=args.max_bytes,
        check_expiry=args.check_expiry,
        sequence_timeout_s=args.sequence_timeout,
        retention_s=args.retention,
        state_dir=args.state_dir,
        log_messages=args.log_messages,
    )
    if args.command == "check":
        sys.exit(_check(options, args.files))
    from etlstage_workers.rdss.worker import RdssTransformer

    from etlstage.worker.runner import main as run_worker

    # The SDK's main() sets up logging from these variables (the options win over the environment).
    for name, value in (
        ("ETLSTAGE_LOG_FORMAT", args.log_format),
        ("ETLSTAGE_SYSLOG_ADDRESS", args.syslog_address),
        ("ETLSTAGE_LOG_LEVEL", args.log_level),
    ):
        if value:
            os.environ[name] = value
    run_worker(RdssTransformer(options), kind="T", app=APP)


def _check(options: Options, files: list[str]) -> int:
    from etlstage_workers.rdss.schemas import load_schema_set
    from etlstage_workers.rdss.validate import MessageValidator

    validator = MessageValidator(
        load_schema_set(options.spec, options.schema_dir),
        max_bytes=options.max_bytes,
        check_expiry=options.check_expiry,
    )
    bad = unreadable = 0
    for name in files:
        try:
            with open(name, "rb") as f:
                raw = f.read()
        except OSError as exc:
            unreadable += 1
            print(f"{APP} check: {name}: cannot read: {exc.strerror}", file=sys.stderr)
            continue
        v = validator.check(raw)
        bad += v.code is not None
        print(f"{name}: {'valid' if v.code is None else v.code + ' ' + str(v.description)}")
    return 2 if unreadable else 1 if bad else 0


if __name__ == "__main__":
    main()
