"""Command lines of the Kafka extractor and loader (or options built directly in tests)."""

from __future__ import annotations

import argparse
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from etlstage_workers.kafka.broker import BOOTSTRAP_ENV
from etlstage_workers.markersafe import DATA_ENCODINGS, ON_MARKER

from etlstage.errors import ConfigError
from etlstage.protocol.pointer import parse_pointer

START_POSITIONS = ("earliest", "latest", "timestamp")
# librdkafka properties the worker sets itself: a --config of one of them would break a guarantee
OWN_CONSUMER = {"enable.auto.commit", "enable.auto.offset.store", "enable.partition.eof", "group.id"}
OWN_PRODUCER = {"acks", "enable.idempotence", "transactional.id"}
# librdkafka properties from the environment, out of the process list (``ps`` shows every
# user a command line, a process's environment only to its own): ETLSTAGE_KAFKA_CONFIG_SASL_PASSWORD
# is sasl.password. Not KAFKA_*: Kafka's own scripts read KAFKA_OPTS, KAFKA_HEAP_OPTS...
CONFIG_ENV_PREFIX = "ETLSTAGE_KAFKA_CONFIG_"
CONFIG_FILE_ENV = "ETLSTAGE_KAFKA_CONFIG_FILE"


@dataclass
class ClientOptions:
    bootstrap: str | None = None
    config: dict[str, str] = field(default_factory=dict)  # more librdkafka properties (security, tuning)
    # where each property of ``config`` was given (--config, a file's line, a variable), for errors
    config_from: dict[str, str] = field(default_factory=dict, repr=False)

    def client_problems(self, own: set[str], prog: str) -> list[str]:
        problems = []
        if not self.bootstrap:
            problems.append(f"--bootstrap: HOST:PORT[,HOST:PORT...] is required (or ${BOOTSTRAP_ENV})")
        for key in sorted(own & set(self.config)):
            where = self.config_from.get(key, "--config")
            problems.append(f"{where} {key}=...: {prog} sets {key} itself (its guarantees depend on it)")
        return problems

    def client_config(self, own: set[str], prog: str) -> dict[str, str]:
        problems = self.client_problems(own, prog)
        if problems:
            raise ConfigError(problems, prog)
        return {"bootstrap.servers": str(self.bootstrap), **self.config}


@dataclass
class Options(ClientOptions):
    topics: list[str] = field(default_factory=list)
    group: str | None = None
    start: str = "earliest"
    timestamp_ms: int | None = None
    envelope: bool = False
    data_encoding: str = "auto"
    on_marker: str = "envelope"
    read_committed: bool = True
    max_records_per_cycle: int = 10000
    max_cycle_seconds: float = 1.0
    poll_seconds: float = 0.1
    lag_log_interval: float = 60.0

    def check(self) -> None:
        problems = self.client_problems(OWN_CONSUMER, "etlstage-kafka")
        if not self.topics:
            problems.append("--topic: a topic name, or a pattern starting with ^, is required")
        for t in self.topics:
            if t.startswith("^"):
                try:
                    re.compile(t)
                except re.error as exc:
                    problems.append(f"--topic {t!r}: not a regular expression ({exc})")
        if self.start == "timestamp" and self.timestamp_ms is None:
            problems.append("--start timestamp needs --timestamp (ISO 8601 or epoch seconds)")
        if self.max_records_per_cycle < 1:
            problems.append(f"--max-records-per-cycle {self.max_records_per_cycle}: expected >= 1")
        if not 0 <= self.max_cycle_seconds <= 3600:
            problems.append(f"--max-cycle-seconds {self.max_cycle_seconds:g}: expected 0..3600")
        if problems:
            raise ConfigError(problems, "etlstage-kafka")


@dataclass
class LoadOptions(ClientOptions):
    topic: str = ""
    key: str | None = None  # JSON pointer to each message's Kafka key
    transactional: bool = False
    transactional_id: str | None = None
    ledger_topic: str | None = None
    ledger_batches: int = 1000
    linger_ms: int = 5

    def check(self) -> None:
        problems = self.client_problems(OWN_PRODUCER, "etlstage-kafka-load")
        if not self.topic:
            problems.append("--topic: the topic to write is required")
        if self.key is not None:
            try:
                parse_pointer(self.key)
            except ValueError as exc:
                problems.append(f"--key: {exc}")
        if self.ledger_batches < 1:
            problems.append(f"--ledger-batches {self.ledger_batches}: expected >= 1")
        if (self.transactional_id or self.ledger_topic) and not self.transactional:
            problems.append("--transactional-id and --ledger-topic need --transactional")
        if problems:
            raise ConfigError(problems, "etlstage-kafka-load")


def parse_config(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"{text!r}: expected KEY=VALUE (a librdkafka property)")
    return key.strip(), value


def parse_timestamp_ms(text: str) -> int:
    from etlstage_workers.kinesis.options import parse_timestamp

    return int(parse_timestamp(text) * 1000)


def _client_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--bootstrap", default=os.environ.get(BOOTSTRAP_ENV), help=f"HOST:PORT[,...] (default ${BOOTSTRAP_ENV})"
    )
    p.add_argument(
        "--config",
        type=parse_config,
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a librdkafka property (security.protocol, fetch/batch tuning); repeatable. Secrets "
        f"(sasl.password...) belong in --config-file or ${CONFIG_ENV_PREFIX}<NAME>: a command line is public",
    )
    p.add_argument(
        "--config-file",
        action="append",
        default=[],
        metavar="PATH",
        help="librdkafka properties, one KEY=VALUE a line (# comments); repeatable; "
        f"default ${CONFIG_FILE_ENV}. --config and ${CONFIG_ENV_PREFIX}<NAME> win over it",
    )
    p.add_argument("--log-format", default=os.environ.get("ETLSTAGE_LOG_FORMAT"), choices=("text", "json", "syslog"))
    p.add_argument("--syslog-address", default=os.environ.get("ETLSTAGE_SYSLOG_ADDRESS"))


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="etlstage-kafka",
        description="etlstage E-worker: reads Kafka topics in a consumer group; a cycle's offsets are "
        "committed to Kafka when the next request arrives (the cycle is loaded).",
    )
    _client_args(p)
    p.add_argument(
        "--topic", action="append", default=[], help="topic to read, or a regular expression starting with ^"
    )
    p.add_argument("--group", help="consumer group id (default etlstage.<pipeline>.<stage>)")
    p.add_argument(
        "--start",
        default="earliest",
        type=str.lower,
        choices=START_POSITIONS,
        help="where a partition with no committed offset starts (default earliest)",
    )
    p.add_argument("--timestamp", type=parse_timestamp_ms, help="for --start timestamp: epoch seconds or ISO 8601")
    p.add_argument("--envelope", action="store_true", help="a JSON envelope per record (key, headers, offset...)")
    p.add_argument("--data-encoding", default="auto", choices=DATA_ENCODINGS)
    p.add_argument("--on-marker", default="envelope", choices=ON_MARKER)
    p.add_argument(
        "--read-uncommitted",
        dest="read_committed",
        action="store_false",
        help="also read records of open and aborted transactions",
    )
    p.add_argument("--max-records-per-cycle", type=int, default=10000)
    p.add_argument("--max-cycle-seconds", type=float, default=1.0)
    p.add_argument("--lag-log-interval", type=float, default=60.0)
    return p


def build_load_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="etlstage-kafka-load",
        description="etlstage L-worker: writes each batch to a Kafka topic; a batch is acknowledged only "
        "once the broker acknowledged every message of it (acks=all, idempotent producer).",
    )
    _client_args(p)
    p.add_argument("--topic", default="", help="the topic to write")
    p.add_argument("--key", help="JSON pointer to each message's key (default: no key)")
    p.add_argument("--transactional", action="store_true", help="each batch one Kafka transaction, never twice")
    p.add_argument("--transactional-id", help="default etlstage.<pipeline>.<stage>.<instance>")
    p.add_argument("--ledger-topic", help="where written batches are noted (default <topic>.etlstage-ledger)")
    p.add_argument("--ledger-batches", type=int, default=1000, help="recent batches checked against a replay")
    p.add_argument("--linger-ms", type=int, default=5)
    return p


def read_config_file(path: str) -> tuple[dict[str, str], dict[str, str]]:
    """``(properties, where each was given)`` from a properties file: ``KEY=VALUE`` lines,
    blank lines and ``#`` or ``!`` comments ignored.  A line of another shape is an error
    naming the file and line, never its text (it may hold a secret)."""
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError([f"--config-file {path}: cannot be read ({exc})"], "etlstage-kafka") from None
    config: dict[str, str] = {}
    where: dict[str, str] = {}
    problems = []
    for number, line in enumerate(lines, 1):
        text = line.strip()
        if not text or text[0] in "#!":
            continue
        key, sep, value = text.partition("=")
        if not sep or not key.strip():
            problems.append(f"--config-file {path}:{number}: expected KEY=VALUE (a librdkafka property)")
            continue
        config[key.strip()] = value.strip()
        where[key.strip()] = f"--config-file {path}:{number}:"
    if problems:
        raise ConfigError(problems, "etlstage-kafka")
    return config, where


def config_from_env(environ: Mapping[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    """``(properties, where each was given)`` from ``ETLSTAGE_KAFKA_CONFIG_<NAME>`` variables:
    the name in lower case, ``_`` read as ``.`` (librdkafka's names have no ``_``)."""
    config: dict[str, str] = {}
    where: dict[str, str] = {}
    for name, value in sorted(environ.items()):
        if name.startswith(CONFIG_ENV_PREFIX) and name != CONFIG_FILE_ENV and len(name) > len(CONFIG_ENV_PREFIX):
            key = name[len(CONFIG_ENV_PREFIX) :].lower().replace("_", ".")
            config[key] = value
            where[key] = f"${name}:"
    return config, where


def _config(ns: argparse.Namespace, environ: Mapping[str, str], cwd: str) -> tuple[dict[str, str], dict[str, str]]:
    """The librdkafka properties of the command and environment: the files' (in order), then
    the environment's, then ``--config``'s, each winning over the one before."""
    config: dict[str, str] = {}
    where: dict[str, str] = {}
    files = ns.config_file or ([environ[CONFIG_FILE_ENV]] if environ.get(CONFIG_FILE_ENV) else [])
    for path in files:
        found, found_where = read_config_file(os.path.join(cwd, os.path.expanduser(path)))
        config.update(found)
        where.update(found_where)
    for found, found_where in (config_from_env(environ), (dict(ns.config), dict.fromkeys(dict(ns.config), "--config"))):
        config.update(found)
        where.update(found_where)
    return config, where


def options_from_args(ns: argparse.Namespace, environ: Mapping[str, str] | None = None, cwd: str = ".") -> Options:
    """The options of a parsed command; ``environ`` (default this process's) and ``cwd``
    (where a relative ``--config-file`` is) as the worker would see them."""
    config, config_from = _config(ns, os.environ if environ is None else environ, cwd)
    opts = Options(
        bootstrap=ns.bootstrap,
        config=config,
        config_from=config_from,
        topics=ns.topic,
        group=ns.group,
        start=ns.start,
        timestamp_ms=ns.timestamp,
        envelope=ns.envelope,
        data_encoding=ns.data_encoding,
        on_marker=ns.on_marker,
        read_committed=ns.read_committed,
        max_records_per_cycle=ns.max_records_per_cycle,
        max_cycle_seconds=ns.max_cycle_seconds,
        lag_log_interval=ns.lag_log_interval,
    )
    opts.check()
    return opts


def load_options_from_args(
    ns: argparse.Namespace, environ: Mapping[str, str] | None = None, cwd: str = "."
) -> LoadOptions:
    """As :func:`options_from_args`, for the loader."""
    config, config_from = _config(ns, os.environ if environ is None else environ, cwd)
    opts = LoadOptions(
        bootstrap=ns.bootstrap,
        config=config,
        config_from=config_from,
        topic=ns.topic,
        key=ns.key,
        transactional=ns.transactional,
        transactional_id=ns.transactional_id,
        ledger_topic=ns.ledger_topic,
        ledger_batches=ns.ledger_batches,
        linger_ms=ns.linger_ms,
    )
    opts.check()
    return opts


def default_name(state_dir: str, stage: str) -> str:
    """``etlstage.<pipeline>.<stage>``: a stage's state folder is ``<state>/<pipeline>/stages/<stage>``."""
    parts = os.path.normpath(state_dir).split(os.sep) if state_dir else []
    pipeline = parts[-3] if len(parts) >= 3 and parts[-2] == "stages" else ""
    return ".".join(x for x in ("etlstage", pipeline, stage) if x)
