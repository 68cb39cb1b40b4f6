"""``etlstage-kafka``: the command line of the Kafka E-worker."""

from __future__ import annotations

import logging
import sys

from etlstage_workers.kafka.extractor import KafkaExtractor
from etlstage_workers.kafka.options import build_parser, options_from_args

from etlstage.errors import EtlstageError
from etlstage.logs import setup_logging
from etlstage.worker import serve

log = logging.getLogger("etlstage.kafka")


def main(argv: list[str] | None = None) -> None:
    from confluent_kafka import KafkaException

    ns = build_parser().parse_args(argv)
    setup_logging("etlstage-kafka", ns.log_format, syslog_address=ns.syslog_address)
    try:
        code = serve(KafkaExtractor(options_from_args(ns)), kind="E")
    except EtlstageError as exc:
        log.error("%s", exc)
        code = exc.exit_code
    except KafkaException as exc:
        log.error("Kafka: %s (nothing committed for the open window)", exc)
        code = 1
    except KeyboardInterrupt:
        code = 130
    except BrokenPipeError:
        log.error("the supervisor closed our stdout; stopping (nothing committed for the open window)")
        code = 1
    sys.exit(code)


if __name__ == "__main__":
    main()
