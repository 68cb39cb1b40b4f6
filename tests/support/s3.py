"""S3 on loopback: moto's server as a subprocess, path-style, for Spark's S3A and boto3.

    with moto_s3(tmp_path) as s3:
        s3.create_bucket("lake")
        conf = s3.spark_conf()          # fs.s3a.* for engine.conf / a SparkSession
        s3.storage_options()            # the same server for delta-rs (deltalake)
        s3.keys("lake", "out/")          # what is there

Credentials are fake and come from the environment (``s3.env()``: the AWS chain's
variables), as S3A's default provider chain reads them; they never appear in the conf.
The server is a process of its own (the test's GIL never stalls it), always stopped.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# Distinctive, so that a test can grep logs, status and metrics for them; moto takes any.
ACCESS_KEY = "AKIAETLSTAGES3TEST"
SECRET_KEY = "etlstage-s3-secret-7c1d0e5b9a2f4e8d"
FAKE_CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": ACCESS_KEY,
    "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_REGION": "us-east-1",
}


@dataclass
class S3Server:
    port: int
    proc: subprocess.Popen
    tls: bool = False  # moto's own self-signed certificate (``moto_s3(..., tls=True)``)

    @property
    def endpoint(self) -> str:
        return f"{'https' if self.tls else 'http'}://127.0.0.1:{self.port}"

    def env(self) -> dict[str, str]:
        return dict(FAKE_CREDENTIALS)

    def spark_conf(self) -> dict[str, str]:
        """S3A settings for this server (no credentials: S3A reads them from the environment)."""
        return {
            "spark.hadoop.fs.s3a.endpoint": self.endpoint,
            "spark.hadoop.fs.s3a.endpoint.region": FAKE_CREDENTIALS["AWS_REGION"],
            "spark.hadoop.fs.s3a.path.style.access": "true",
            "spark.hadoop.fs.s3a.connection.ssl.enabled": "false",
            "spark.hadoop.fs.s3a.aws.credentials.provider": (
                "software.amazon.awssdk.auth.credentials.EnvironmentVariableCredentialsProvider"
            ),
        }

    def storage_options(self) -> dict[str, str]:
        """delta-rs (``deltalake``) options for this server."""
        keys = ("AWS_REGION", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")
        return {"AWS_ENDPOINT_URL": self.endpoint, "AWS_ALLOW_HTTP": "true", **{k: FAKE_CREDENTIALS[k] for k in keys}}

    def client(self, service: str = "s3") -> Any:
        """A boto3 client of this server (moto serves every AWS service on one port)."""
        import boto3

        return boto3.client(
            service,
            endpoint_url=self.endpoint,
            verify=not self.tls,
            region_name=FAKE_CREDENTIALS["AWS_REGION"],
            aws_access_key_id=FAKE_CREDENTIALS["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=FAKE_CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
        )

    def create_bucket(self, name: str) -> str:
        self.client().create_bucket(Bucket=name)
        return name

    def keys(self, bucket: str, prefix: str = "") -> list[str]:
        found: list[str] = []
        pages = self.client().get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
        for page in pages:
            found.extend(o["Key"] for o in page.get("Contents", ()))
        return sorted(found)

    def read(self, bucket: str, key: str) -> bytes:
        body: bytes = self.client().get_object(Bucket=bucket, Key=key)["Body"].read()
        return body


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def moto_s3(log_dir: Path, timeout: float = 30.0, *, tls: bool = False) -> Iterator[S3Server]:
    """moto's S3 server on a free loopback port for the ``with`` block; its log in ``log_dir``.
    ``tls``: HTTPS with moto's own self-signed certificate, for a client that speaks nothing
    else (the AWS SDK v1 that Delta's DynamoDB log store uses)."""
    import ssl
    import urllib.error
    import urllib.request

    exe = shutil.which("moto_server")
    if exe is None:
        raise RuntimeError("moto_server is not installed (pip install 'moto[server]')")
    port = _free_port()
    log_dir.mkdir(parents=True, exist_ok=True)
    with open(log_dir / f"moto-s3{'-tls' if tls else ''}.log", "wb") as out:
        proc = subprocess.Popen(
            [exe, "-H", "127.0.0.1", "-p", str(port), *(["--ssl"] if tls else [])],
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, **FAKE_CREDENTIALS},
            start_new_session=True,
        )
    server = S3Server(port, proc, tls)
    unchecked = ssl._create_unverified_context() if tls else None  # its certificate is made up on start
    try:
        deadline = time.monotonic() + timeout
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"moto_server exited ({proc.returncode}): see {out.name}")
            try:
                urllib.request.urlopen(server.endpoint + "/moto-api/", timeout=1, context=unchecked).close()
                break
            except (urllib.error.URLError, OSError):
                if time.monotonic() > deadline:
                    raise TimeoutError(f"moto_server did not answer on {server.endpoint} within {timeout}s") from None
                time.sleep(0.1)
        yield server
    finally:
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(10)


__all__ = ["ACCESS_KEY", "FAKE_CREDENTIALS", "SECRET_KEY", "S3Server", "moto_s3"]
