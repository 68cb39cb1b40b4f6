"""``etlstage-kinesis``: the command line of the Kinesis E-worker."""

from __future__ import annotations

import logging
import sys

from botocore.exceptions import BotoCoreError, ClientError
from etlstage_workers.kinesis.extractor import KinesisExtractor
from etlstage_workers.kinesis.options import build_parser, options_from_args

from etlstage.errors import EtlstageError
from etlstage.logs import setup_logging
from etlstage.worker import serve

log = logging.getLogger("etlstage.kinesis")


def main(argv: list[str] | None = None) -> None:
    ns = build_parser().parse_args(argv)
    setup_logging("etlstage-kinesis", ns.log_format, syslog_address=ns.syslog_address)
    # botocore's DEBUG lines print request headers and canonical requests: the session token.
    logging.getLogger("botocore").setLevel(max(logging.getLogger().level, logging.INFO))
    try:
        options = options_from_args(ns)
        code = serve(KinesisExtractor(options), kind="E")
    except EtlstageError as exc:
        log.error("%s", exc)
        code = exc.exit_code
    except (ClientError, BotoCoreError) as exc:
        # e.g. ResourceNotFoundException for a wrong stream name, NoCredentialsError
        log.error("Kinesis: %s (nothing committed for the open window)", exc)
        code = 1
    except KeyboardInterrupt:
        code = 130
    except BrokenPipeError:
        log.error("the supervisor closed our stdout; stopping (nothing committed for the open window)")
        code = 1
    sys.exit(code)


if __name__ == "__main__":
    main()
