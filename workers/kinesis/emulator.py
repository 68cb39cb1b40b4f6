"""A Kinesis emulator on loopback (moto's server), for demos and tests without AWS.

Command line::

    etlstage-kinesis-emulator --port 0 --stream demo --shards 2 \\
        --records data.jsonl --partition-key /id

prints the endpoint URL (``http://127.0.0.1:PORT``) as its first stdout line, seeds the
stream, and serves until SIGTERM/SIGINT (or, with ``--exit-on-stdin-eof``, until its
stdin closes).  From Python::

    emu = Emulator().start()
    emu.create_stream("demo", shards=2)
    emu.put_records("demo", [b'{"id":1}'], partition_key="/id")
    ...
    emu.stop()

Requests need some credentials; the emulator accepts any, and :meth:`Emulator.env`
gives a set (``AWS_ACCESS_KEY_ID=testing`` ...) to hand to workers.
"""

from __future__ import annotations

import argparse
import base64
import json
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterable
from typing import Any

from etlstage.protocol.pointer import MISSING, parse_pointer, resolve

BATCH = 500  # PutRecords maximum (records)
BATCH_BYTES = 5 << 20  # ... and bytes (data and partition keys)

FAKE_CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
}


def partition_key_fn(pointer: str | None) -> Callable[[int, bytes], str]:
    """A partition key per record: the JSON value at ``pointer``, else the line number."""
    if not pointer:
        return lambda i, data: str(i)

    tokens = parse_pointer(pointer)

    def key(i: int, data: bytes) -> str:
        try:
            value = resolve(json.loads(data), tokens)
        except ValueError as exc:
            raise ValueError(f"record #{i}: not JSON ({exc}): {data[:80]!r}") from None
        if value is MISSING:
            raise ValueError(f"record #{i}: nothing at JSON pointer {pointer!r}: {data[:80]!r}")
        return value if isinstance(value, str) else json.dumps(value)

    return key


class Emulator:
    def __init__(self, port: int = 0, region: str = "us-east-1") -> None:
        self.port = port
        self.region = region
        self._server: Any = None

    def start(self) -> Emulator:
        from moto.server import ThreadedMotoServer

        _patch_moto()

        logging.getLogger("werkzeug").setLevel(logging.WARNING)  # no line per request
        self._server = ThreadedMotoServer(ip_address="127.0.0.1", port=self.port, verbose=False)
        self._server.start()
        self.port = self._server.get_host_and_port()[1]
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop()
            self._server = None

    def __enter__(self) -> Emulator:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def endpoint_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def env(self) -> dict[str, str]:
        """Environment for a worker talking to this emulator (fake credentials, endpoint)."""
        return dict(FAKE_CREDENTIALS, AWS_DEFAULT_REGION=self.region, AWS_ENDPOINT_URL_KINESIS=self.endpoint_url)

    def client(self) -> Any:
        import boto3

        return boto3.client(
            "kinesis",
            endpoint_url=self.endpoint_url,
            region_name=self.region,
            aws_access_key_id=FAKE_CREDENTIALS["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=FAKE_CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
        )

    def create_stream(self, name: str, shards: int = 1) -> None:
        """Create the stream, ACTIVE at once.

        As :meth:`put_records`, through the server's own backend in this process, not boto3
        over HTTP: importing boto3 and building its client was a third of the emulator's
        start-up, which the stock demo pays at every run.
        """
        from moto.core import DEFAULT_ACCOUNT_ID
        from moto.kinesis.models import kinesis_backends

        kinesis_backends[DEFAULT_ACCOUNT_ID][self.region].create_stream(name, shards)

    def put_records(self, stream: str, records: Iterable[bytes], partition_key: str | None = None) -> int:
        """PutRecords in batches of 500; partition key from the JSON pointer (or a counter).

        The server runs in this process, so the batches go straight to its backend's
        PutRecords (same checks, shards and sequence numbers) without HTTP: seeding tens
        of thousands of records takes a fraction of a second, not several.
        """
        from moto.core import DEFAULT_ACCOUNT_ID
        from moto.kinesis.models import kinesis_backends

        backend = kinesis_backends[DEFAULT_ACCOUNT_ID][self.region]
        key = partition_key_fn(partition_key)
        batch: list[dict[str, Any]] = []
        size = total = 0
        for i, data in enumerate(records):
            entry = {"Data": base64.b64encode(data).decode(), "PartitionKey": key(i, data)}
            if batch and (len(batch) == BATCH or size + len(data) > BATCH_BYTES):
                total += _put(backend, stream, batch)
                batch, size = [], 0
            batch.append(entry)
            size += len(data) + len(entry["PartitionKey"])
        if batch:
            total += _put(backend, stream, batch)
        return total


_patched = False


def _patch_moto() -> None:
    """Two fixes to moto's Kinesis shards, for a reader and a writer at once at speed:

    - moto finds a shard's last sequence number by copying all its keys, for every record
      put: seeding n records costs O(n^2) (8 s for 40,000).  The records are an ordered
      dict, so the last key is ``next(reversed(...))``: same answer, constant time;
    - moto's threaded server runs a GetRecords that iterates a shard's records while a
      PutRecords adds to them ("OrderedDict mutated during iteration", a 500): one lock
      per process around both.
    """
    global _patched
    if _patched:
        return
    from moto.kinesis.models import Shard

    lock = threading.RLock()
    get_records, put_record = Shard.get_records, Shard.put_record

    def last_sequence_number(shard: Any) -> int:
        return next(reversed(shard.records), 0)

    def locked_get_records(shard: Any, *args: Any, **kwargs: Any) -> Any:
        with lock:
            return get_records(shard, *args, **kwargs)

    def locked_put_record(shard: Any, *args: Any, **kwargs: Any) -> Any:
        with lock:
            return put_record(shard, *args, **kwargs)

    # setattr: patches, on purpose (mypy refuses assignments to methods)
    setattr(Shard, "get_max_sequence_number", last_sequence_number)  # noqa: B010
    setattr(Shard, "get_records", locked_get_records)  # noqa: B010
    setattr(Shard, "put_record", locked_put_record)  # noqa: B010
    _patched = True


def _put(backend: Any, stream: str, batch: list[dict[str, Any]]) -> int:
    reply = backend.put_records(None, stream, batch)
    if reply.get("FailedRecordCount"):
        raise RuntimeError(f"PutRecords to {stream!r}: {reply['FailedRecordCount']} of {len(batch)} records failed")
    return len(batch)


def read_lines(path: str) -> list[bytes]:
    """One record per non-empty line (a JSONL file is just that)."""
    with open(path, "rb") as f:
        return [line.rstrip(b"\r\n") for line in f if line.strip()]


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(
        prog="etlstage-kinesis-emulator",
        description="Kinesis emulator (moto) on 127.0.0.1; prints its endpoint URL.",
    )
    p.add_argument("--port", type=int, default=0, help="TCP port (0: a free one)")
    p.add_argument("--region", default="us-east-1")
    p.add_argument("--stream", help="create this stream")
    p.add_argument("--shards", type=int, default=1)
    p.add_argument("--records", help="file with one record per line (JSONL works) to put into --stream")
    p.add_argument("--partition-key", help="JSON pointer to each record's partition key, e.g. /messageHeader/id")
    p.add_argument("--exit-on-stdin-eof", action="store_true", help="stop when stdin closes")
    p.add_argument(
        "--service",
        action="store_true",
        help="run as an etlstage service: print KEY=VALUE lines for the stages' environment "
        "(endpoint, fake credentials, region) and READY once seeded; stop when stdin closes",
    )
    ns = p.parse_args(argv)
    if ns.records and not ns.stream:
        p.error("--records needs --stream")

    done = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: done.set())
    emu = Emulator(ns.port, ns.region).start()
    if not ns.service:
        print(emu.endpoint_url, flush=True)
    if ns.stream:
        emu.create_stream(ns.stream, ns.shards)
        if ns.records:
            n = emu.put_records(ns.stream, read_lines(ns.records), ns.partition_key)
            print(f"put {n} records into {ns.stream}", file=sys.stderr, flush=True)
    if ns.service:
        for key, value in emu.env().items():
            print(f"{key}={value}")
        print("READY", flush=True)

    if ns.exit_on_stdin_eof or ns.service:

        def wait_for_eof() -> None:
            sys.stdin.read()
            done.set()

        threading.Thread(target=wait_for_eof, daemon=True).start()
    while not done.wait(0.5):
        pass
    # The server's thread ends with the process: its records live in memory, and a clean
    # shutdown would wait out werkzeug's half-second poll (a demo run's last quarter second).
    os._exit(0)


if __name__ == "__main__":
    main()
