"""moto's S3 server on loopback for the table tests: a bucket, the S3A settings that reach
it, and credentials that tests can look for in what a run leaves behind.

The server is the one the Kinesis tests use (:class:`etlstage_workers.kinesis.emulator.Emulator`,
moto's threaded server: every AWS service on one port), started on a free port."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from etlstage_workers.kinesis.emulator import Emulator

# Distinctive, so that a test can grep logs, status and metrics for them; moto takes any.
ACCESS_KEY = "AKIAETLSTAGELAKETEST"
SECRET_KEY = "lake-secret-7c1d0e5b9a2f4e8d"
REGION = "us-east-1"


@dataclass(frozen=True)
class S3:
    endpoint: str
    bucket: str

    def env(self) -> dict[str, str]:
        """The usual AWS chain's environment: the S3A connector and delta-rs both read it."""
        return {"AWS_ACCESS_KEY_ID": ACCESS_KEY, "AWS_SECRET_ACCESS_KEY": SECRET_KEY, "AWS_DEFAULT_REGION": REGION}

    def spark_conf(self) -> dict[str, str]:
        """S3A settings for this server (no credentials: they come from the environment)."""
        return {
            "spark.hadoop.fs.s3a.endpoint": self.endpoint,
            "spark.hadoop.fs.s3a.endpoint.region": REGION,
            "spark.hadoop.fs.s3a.path.style.access": "true",
            "spark.hadoop.fs.s3a.connection.ssl.enabled": "false",
        }

    def storage_options(self) -> dict[str, str]:
        """delta-rs (``deltalake``) options for this server."""
        return {
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_ALLOW_HTTP": "true",
            "AWS_REGION": REGION,
            "AWS_ACCESS_KEY_ID": ACCESS_KEY,
            "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
        }

    def uri(self, path: str) -> str:
        return f"s3a://{self.bucket}/{path}"


@contextmanager
def s3_server(bucket: str = "lake", startup_timeout: float = 30.0) -> Iterator[S3]:
    """moto's server with ``bucket`` created; stopped on exit."""
    import boto3

    with Emulator(region=REGION) as emu:
        client = boto3.client(
            "s3",
            endpoint_url=emu.endpoint_url,
            region_name=REGION,
            aws_access_key_id=ACCESS_KEY,
            aws_secret_access_key=SECRET_KEY,
        )
        deadline = time.monotonic() + startup_timeout
        while True:
            try:
                client.create_bucket(Bucket=bucket)
                break
            except Exception:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        yield S3(emu.endpoint_url, bucket)
