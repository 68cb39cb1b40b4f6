"""``etlstage-kcl-adapter``: the console script.

    etlstage-kcl-adapter [--protocol-version 1|2] [--shard-id ID] [--timeout S]
                         [--shutdown-timeout S] [--checkpoint-db PATH]
                         [--parallel-shards N] [--no-shutdown-requested] [--legacy-shutdown]
                         -- <record processor argv...>

Stage type, mode, batch size and markers come from ``ETLSTAGE_*`` as for every worker.
Exit status: 0 after a clean end of input; 1 when the child failed (exited, hung,
answered the wrong action) or an input message was unusable; 2 for bad options.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys

from etlstage_workers.kcl.adapter import KclLoader, KclTap, Options

from etlstage.errors import ConfigError, EtlstageError, ProtocolViolation
from etlstage.logs import setup_logging
from etlstage.protocol.scenario import Scenario
from etlstage.worker import serve

APP = "etlstage-kcl-adapter"
DB_NAME = "kcl-multilang.sqlite"
log = logging.getLogger(APP)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=APP,
        description="Run a KCL MultiLangDaemon record processor as an etlstage T- or L-worker.",
        epilog="Everything after -- is the record processor's command (an argv, never run by a shell).",
    )
    p.add_argument(
        "--protocol-version",
        type=int,
        choices=(1, 2),
        default=2,
        help="MLD protocol: 2 = KCL 2.x/3.x (amazon_kclpy >= 2), 1 = KCL 1.x (default: 2)",
    )
    p.add_argument(
        "--shard-id",
        default=None,
        help="shard id announced for input that is not a Kinesis envelope (default: shardId-<instance, 12 digits>)",
    )
    p.add_argument(
        "--timeout",
        type=float,
        default=300.0,
        help="seconds the child has to answer initialize, processRecords, shardEnded (default 300)",
    )
    p.add_argument(
        "--shutdown-timeout",
        type=float,
        default=60.0,
        help="seconds for shutdownRequested, leaseLost/shutdown and the child's exit (default 60)",
    )
    p.add_argument(
        "--checkpoint-db",
        default=None,
        help=f"SQLite file for checkpoints and sequence counters (default: $ETLSTAGE_STATE_DIR/{DB_NAME})",
    )
    p.add_argument(
        "--no-shutdown-requested",
        dest="shutdown_requested",
        action="store_false",
        help="at the end of input go straight to leaseLost/shutdown (for V1 children that do not "
        "know shutdownRequested)",
    )
    p.add_argument(
        "--legacy-shutdown",
        action="store_true",
        help="V2 records, but end shards and leases with 'shutdown' + reason TERMINATE/ZOMBIE as KCL 1.x "
        "daemons did (erlmld V2) instead of shardEnded/leaseLost",
    )
    p.add_argument(
        "--parallel-shards",
        type=int,
        default=4,
        help="shards of one batch processed at the same time, each by its own child (default 4; "
        "1 = one after the other)",
    )
    p.add_argument(
        "--log-format", default=os.environ.get("ETLSTAGE_LOG_FORMAT") or "text", choices=("text", "json", "syslog")
    )
    p.add_argument("--syslog-address", default=os.environ.get("ETLSTAGE_SYSLOG_ADDRESS") or None)
    p.add_argument("command", nargs=argparse.REMAINDER, help="-- record processor argv")
    return p


def parse_options(argv: list[str], scenario: Scenario) -> tuple[Options, argparse.Namespace]:
    args = build_parser().parse_args(argv)
    command = list(args.command)
    if command and command[0] == "--":
        command = command[1:]
    problems = []
    if not command:
        problems.append("no record processor command: give it after --, e.g. -- python3 processor.py")
    if args.parallel_shards < 1:
        problems.append(f"--parallel-shards {args.parallel_shards}: expected >= 1")
    if args.timeout <= 0 or args.shutdown_timeout <= 0:
        problems.append(f"--timeout {args.timeout} / --shutdown-timeout {args.shutdown_timeout}: expected > 0")
    db = args.checkpoint_db
    if db is None:
        if not scenario.state_dir:
            problems.append("no checkpoint store: set ETLSTAGE_STATE_DIR or pass --checkpoint-db PATH")
        else:
            db = os.path.join(scenario.state_dir, DB_NAME)
    if scenario.type not in ("T", "L"):
        problems.append(f"ETLSTAGE_TYPE={scenario.type!r}: the KCL adapter is a T- or L-worker")
    if problems:
        raise ConfigError(problems, APP)
    return Options(
        argv=command,
        version=args.protocol_version,
        shard_id=args.shard_id,
        timeout=args.timeout,
        shutdown_timeout=args.shutdown_timeout,
        checkpoint_db=db,
        shutdown_requested=args.shutdown_requested,
        parallel_shards=args.parallel_shards,
        legacy_shutdown=args.legacy_shutdown,
    ), args


def _kill_children_on_sigterm(worker: KclTap | KclLoader) -> None:
    """SIGTERM (the supervisor stopping us): kill the children, no goodbye messages.

    The children run in their own sessions, so the signal would not reach them."""

    def stop(signum: int, frame: object) -> None:
        worker.failed = True  # teardown then kills instead of shutting down gracefully
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, stop)


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    args = build_parser().parse_args(argv)
    setup_logging(APP, args.log_format, syslog_address=args.syslog_address)
    try:
        scenario = Scenario.from_env()
        options, _ = parse_options(argv, scenario)
        worker = KclTap(options) if scenario.type == "T" else KclLoader(options)
        _kill_children_on_sigterm(worker)
        code = serve(worker, scenario=scenario)
    except ConfigError as exc:
        log.error("%s", exc)
        code = 2
    except ProtocolViolation as exc:
        log.error("protocol violation: %s", exc)
        code = 3
    except EtlstageError as exc:
        log.error("%s", exc)
        code = exc.exit_code or 1
    except BrokenPipeError:
        log.error("the supervisor closed our stdout; stopping")
        code = 1
    except KeyboardInterrupt:
        code = 130
    sys.exit(code)


if __name__ == "__main__":
    main()
