"""The few Kinesis calls the extractor makes, each behind the RDSS backoff.

Credentials come only from boto3's normal chain (environment, profile, instance role);
nothing here logs them.  botocore's own retries are off: :class:`~.retry.Backoff` is the
one retry policy.
"""

from __future__ import annotations

import functools
import logging
import os
from typing import Any

import boto3
from botocore.config import Config
from botocore.exceptions import ClientError
from etlstage_workers.kinesis.retry import Backoff, RateLimit, error_code

from etlstage.errors import ConfigError

log = logging.getLogger("etlstage.kinesis")


def stream_args(stream: str) -> dict[str, str]:
    """``{"StreamARN": ...}`` for an ARN, ``{"StreamName": ...}`` otherwise."""
    if stream.startswith("arn:"):
        return {"StreamARN": stream}
    return {"StreamName": stream}


def stream_key(stream: str) -> str:
    """The name checkpoints are kept under: the stream name, also for an ARN."""
    if stream.startswith("arn:"):
        return stream.rsplit("/", 1)[-1]
    return stream


def region_of(stream: str) -> str | None:
    parts = stream.split(":")
    return parts[3] if stream.startswith("arn:") and len(parts) > 3 and parts[3] else None


def make_client(stream: str, region: str | None, endpoint_url: str | None, profile: str | None) -> Any:
    session = boto3.session.Session(profile_name=profile) if profile else boto3.session.Session()
    region = region or region_of(stream) or session.region_name
    if not region:
        raise ConfigError([f"stream {stream!r}: no AWS region (give --region, a stream ARN, or AWS_REGION)"])
    config = Config(
        retries={"mode": "standard", "total_max_attempts": 1},
        connect_timeout=10,
        read_timeout=30,
        max_pool_connections=16,
    )
    client = session.client("kinesis", region_name=region, endpoint_url=endpoint_url, config=config)
    actual = client.meta.endpoint_url  # what boto3 will call, wherever it found it
    log.info(
        "kinesis client: stream %s, region %s, endpoint %s (%s)",
        stream,
        region,
        actual,
        endpoint_source(endpoint_url, actual),
    )
    return client


def endpoint_source(given: str | None, actual: str) -> str:
    """Where the endpoint a client calls came from, for the log: an emulator must not pass for AWS."""
    if given:
        return "given"
    for name in ("AWS_ENDPOINT_URL_KINESIS", "AWS_ENDPOINT_URL"):  # botocore's service-specific, then global
        if os.environ.get(name):
            return f"from {name}"
    if ".amazonaws.com" in actual:
        return "the region's AWS endpoint"
    return "from the AWS configuration"


class KinesisApi:
    def __init__(self, client: Any, stream: str, backoff: Backoff) -> None:
        self.client = client
        self.stream = stream
        self._args = stream_args(stream)
        self.backoff = backoff

    def list_shards(self, page_size: int = 1000) -> list[dict[str, Any]]:
        """Every shard of the stream, following NextToken."""
        shards: list[dict[str, Any]] = []
        token: str | None = None
        while True:
            if token is None:
                page = self.backoff.call(
                    "ListShards", lambda: self.client.list_shards(MaxResults=page_size, **self._args)
                )
            else:
                page = self.backoff.call("ListShards", functools.partial(self._next_page, token, page_size))
            shards.extend(page.get("Shards", []))
            token = page.get("NextToken")
            if not token:
                return shards

    def _next_page(self, token: str, page_size: int) -> dict[str, Any]:
        try:
            return self.client.list_shards(NextToken=token, MaxResults=page_size)
        except ClientError as exc:
            # AWS wants NextToken alone; some emulators want the stream named again
            if error_code(exc) not in ("InvalidToken", "InvalidArgumentException"):
                raise
            return self.client.list_shards(NextToken=token, MaxResults=page_size, **self._args)

    def shard_iterator(self, shard_id: str, kind: str, seq: str | None = None, ts: float | None = None) -> str:
        kwargs: dict[str, Any] = dict(self._args, ShardId=shard_id, ShardIteratorType=kind)
        if seq is not None:
            kwargs["StartingSequenceNumber"] = seq
        if ts is not None:
            kwargs["Timestamp"] = ts
        what = f"GetShardIterator({shard_id}, {kind})"
        reply = self.backoff.call(what, lambda: self.client.get_shard_iterator(**kwargs))
        return reply["ShardIterator"]

    def get_records(self, iterator: str, limit: int, shard_id: str, rate: RateLimit) -> dict[str, Any]:
        """One GetRecords, retried on throttling; ExpiredIteratorException goes to the caller.

        ``rate`` paces every attempt, retries included (at most 5 per second per shard).
        """
        args: dict[str, Any] = {"ShardIterator": iterator, "Limit": limit}
        if "StreamARN" in self._args:
            args["StreamARN"] = self._args["StreamARN"]

        def attempt() -> dict[str, Any]:
            rate.wait()
            return self.client.get_records(**args)

        return self.backoff.call(f"GetRecords({shard_id})", attempt)
