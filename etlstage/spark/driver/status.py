"""``etlstage status`` for the Spark engine: what Spark's checkpoint says.

The checkpoint's ``offsets/N`` is written before micro-batch N runs and ``commits/N``
after every task of its sink acknowledged it, so a batch with offsets and no commit is
in flight (after a crash: the batch that is replayed, with the same offsets).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from etlstage.config.model import PipelineConfig
from etlstage.spark.checkpoint import check_checkpoint, is_local


@dataclass
class CheckpointStatus:
    path: str
    committed: int | None = None  # the last committed micro-batch
    committed_count: int = 0
    in_flight: list[int] = field(default_factory=list)
    offsets: dict[str, object] = field(default_factory=dict)  # E-stage -> offset of the last planned batch
    committed_offsets: dict[str, object] = field(default_factory=dict)  # ... of the last committed batch
    updated_at: float | None = None
    unread: str = ""  # why the checkpoint was not read (a file system this cannot read, no access)


class _LocalFiles:
    """The checkpoint's files on this machine's disk."""

    def __init__(self, root: str) -> None:
        self.root = Path(root)

    def batches(self, folder: str) -> list[int]:
        d = self.root / folder
        return sorted(int(p.name) for p in d.glob("[0-9]*") if p.name.isdigit()) if d.is_dir() else []

    def text(self, folder: str, n: int) -> str | None:
        try:
            return (self.root / folder / str(n)).read_text()
        except OSError:  # Spark removed it meanwhile (it keeps the last hundred or so)
            return None

    def mtime(self, folder: str, n: int) -> float | None:
        try:
            return (self.root / folder / str(n)).stat().st_mtime
        except OSError:
            return None


class _ObjectStoreFiles:
    """The checkpoint's files on S3 (``s3a://``, ``s3://``), read with pyarrow's S3 client:
    credentials from the usual AWS chain, the endpoint and region from the pipeline's own
    S3A settings (``engine.conf``), as Spark's run used them."""

    def __init__(self, uri: str, conf: dict[str, str]) -> None:
        from pyarrow import fs

        parts = urlsplit(uri)
        endpoint = conf.get("spark.hadoop.fs.s3a.endpoint", "")
        secure = conf.get("spark.hadoop.fs.s3a.connection.ssl.enabled", "true") != "false"
        options: dict[str, object] = {}
        if endpoint:
            options["endpoint_override"] = endpoint.split("://", 1)[-1]
            options["scheme"] = "https" if secure and not endpoint.startswith("http://") else "http"
        region = conf.get("spark.hadoop.fs.s3a.endpoint.region") or os.environ.get("AWS_REGION")
        if region:
            options["region"] = region
        if conf.get("spark.hadoop.fs.s3a.path.style.access") == "true":
            options["force_virtual_addressing"] = False
        self.fs = fs.S3FileSystem(**options)
        self.base = f"{parts.netloc}{parts.path}".rstrip("/")

    def batches(self, folder: str) -> list[int]:
        from pyarrow import fs

        infos = self.fs.get_file_info(fs.FileSelector(f"{self.base}/{folder}", allow_not_found=True))
        return sorted(int(i.base_name) for i in infos if i.base_name.isdigit())

    def text(self, folder: str, n: int) -> str | None:
        try:
            with self.fs.open_input_stream(f"{self.base}/{folder}/{n}") as f:
                return f.read().decode()
        except OSError:
            return None

    def mtime(self, folder: str, n: int) -> float | None:
        info = self.fs.get_file_info(f"{self.base}/{folder}/{n}")
        return info.mtime.timestamp() if info.mtime is not None else None


OBJECT_STORES = ("s3a://", "s3://", "s3n://")


def read_checkpoint(config: PipelineConfig, *, remote: bool = False) -> CheckpointStatus:
    """What the checkpoint says, on a local path or (``remote``: for ``etlstage status``, not
    at every refresh of a run's figures) on S3; another file system's (``hdfs://``,
    ``gs://`` ...) is left to Spark: ``unread`` says why."""
    where = config.engine.checkpoint
    files: _LocalFiles | _ObjectStoreFiles
    if is_local(where):
        check_checkpoint(Path(where))  # damaged: named, with what to do (exit 2), as `run` does
        files = _LocalFiles(where)
    elif where.startswith(OBJECT_STORES) and remote:
        try:
            files = _ObjectStoreFiles(where, config.engine.conf)
            files.batches("commits")
        except Exception as exc:  # no credentials, no network: say so, do not guess
            return CheckpointStatus(where, unread=f"cannot read it: {exc}".splitlines()[0][:300])
    elif where.startswith(OBJECT_STORES):
        return CheckpointStatus(where, unread="on S3: `etlstage status` reads it, a running driver's figures do not")
    else:
        return CheckpointStatus(where, unread="not read from here (only local paths and S3)")
    status = CheckpointStatus(where)
    offsets, commits = files.batches("offsets"), files.batches("commits")
    if commits:
        status.committed = commits[-1]
        status.committed_count = len(commits)
        status.updated_at = files.mtime("commits", commits[-1])
    status.in_flight = [b for b in offsets if status.committed is None or b > status.committed]
    if offsets:
        status.offsets = _offsets(files.text("offsets", offsets[-1]), config)
    if status.committed is not None and status.committed in offsets:
        status.committed_offsets = _offsets(files.text("offsets", status.committed), config)
    return status


def _offsets(text: str | None, config: PipelineConfig) -> dict[str, object]:
    """E-stage -> its offset in one ``offsets/N`` file of the checkpoint."""
    found: dict[str, object] = {}
    if text is None:
        return found
    lines = text.splitlines()
    sources = [s.name for s in config.stages if s.type == "E"]  # the query's sources, in this order
    for name, line in zip(sources, lines[2:], strict=False):
        try:
            found[name] = json.loads(line)
        except ValueError:
            found[name] = line
    return found


__all__ = ["CheckpointStatus", "read_checkpoint"]
