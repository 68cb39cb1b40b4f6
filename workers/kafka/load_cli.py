"""``etlstage-kafka-load``: the command line of the Kafka L-worker."""

from __future__ import annotations

import logging
import sys

from etlstage_workers.kafka.loader import KafkaLoader
from etlstage_workers.kafka.options import build_load_parser, load_options_from_args

from etlstage.errors import EtlstageError
from etlstage.logs import setup_logging
from etlstage.worker import serve

log = logging.getLogger("etlstage.kafka")


def main(argv: list[str] | None = None) -> None:
    from confluent_kafka import KafkaException

    ns = build_load_parser().parse_args(argv)
    setup_logging("etlstage-kafka-load", ns.log_format, syslog_address=ns.syslog_address)
    try:
        code = serve(KafkaLoader(load_options_from_args(ns)), kind="L")
    except EtlstageError as exc:
        log.error("%s (the open batch is not acknowledged: it is sent again)", exc)
        code = exc.exit_code
    except KafkaException as exc:
        log.error("Kafka: %s (the open batch is not acknowledged: it is sent again)", exc)
        code = 1
    except KeyboardInterrupt:
        code = 130
    sys.exit(code)


if __name__ == "__main__":
    main()
