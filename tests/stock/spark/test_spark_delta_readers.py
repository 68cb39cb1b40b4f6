"""A reader without Spark (delta-rs) polls the loader's Delta table while the loader is
SIGKILLed at seeded random moments during its commits: every snapshot it sees holds whole
batches only (each batch is one window of ten new ids, so a snapshot's row count is a
multiple of ten) and never a key twice; after the run, every version of the table's log
holds whole batches too, and the last exactly the expected rows. On a local path and on S3
(``s3a://``, moto's server on loopback)."""

from __future__ import annotations

import json
import os
import random
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import psutil
import pytest

from tests.conftest import PY
from tests.support.paths import FIXTURES
from tests.support.run_cli import RUN_ONCE
from tests.support.s3 import moto_s3

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1500)]

IDS = 100
PER_WINDOW = 10
KILLS = 2


@dataclass
class Lake:
    """Where the table lives: the loader's ``--output`` (and its extra arguments), how
    delta-rs reads it, and how many commits its log holds."""

    output: str
    reader_uri: str
    commits: Callable[[], int]
    storage_options: dict[str, str] = field(default_factory=dict)
    loader_args: str = ""
    env: dict[str, str] = field(default_factory=dict)

    def ids(self, version: int | None = None) -> list[int]:
        from deltalake import DeltaTable

        table = DeltaTable(self.reader_uri, version=version, storage_options=self.storage_options or None)
        return table.to_pyarrow_table(columns=["id"]).column("id").to_pylist()

    def version(self) -> int:
        from deltalake import DeltaTable

        return DeltaTable(self.reader_uri, storage_options=self.storage_options or None).version()


def whole_batches(ids: list[int]) -> str | None:
    """What is wrong with a snapshot's ids, if anything: a key twice, or part of a batch."""
    repeated = [i for i, n in Counter(ids).items() if n > 1]
    if repeated or len(ids) % PER_WINDOW:
        return f"{len(ids)} rows, repeated {repeated[:5]}"
    return None


@contextmanager
def lake(kind: str, tmp: Path) -> Iterator[Lake]:
    if kind == "local":
        log_dir = tmp / "out" / "_delta_log"
        yield Lake("out", str(tmp / "out"), lambda: len(list(log_dir.glob("*.json"))))
        return
    with moto_s3(tmp.parent / f"{tmp.name}-s3") as s3:  # its log outside the pipeline's folder
        s3.create_bucket("lake")

        def commits() -> int:
            return sum(k.endswith(".json") for k in s3.keys("lake", "out/_delta_log/"))

        conf = ", ".join(f'--conf, "{k}={v}"' for k, v in s3.spark_conf().items())
        yield Lake("s3a://lake/out", "s3://lake/out", commits, s3.storage_options(), f", {conf}", s3.env())


class Poller(threading.Thread):
    """Reads the table over and over; keeps what was wrong with any snapshot."""

    def __init__(self, table: Lake) -> None:
        super().__init__(daemon=True)
        self.table = table
        self.stop = threading.Event()
        self.snapshots = 0
        self.problems: list[str] = []

    def run(self) -> None:
        read_at = -1  # the log's number of commit files when the table was last read
        while not self.stop.is_set():
            # a snapshot stands until the next commit (seconds): the log is listed ten times a
            # second and the table read when it grew — a read of an unchanged log sees the same
            # snapshot, and on S3 each read is tens of requests to moto, CPU the loader needs
            commits = self.table.commits()
            if commits == read_at:
                self.stop.wait(0.1)
                continue
            try:
                ids = self.table.ids()
            except Exception:  # no table yet
                self.stop.wait(0.05)
                continue
            read_at = commits
            self.snapshots += 1
            if (problem := whole_batches(ids)) is not None:
                self.problems.append(problem)
            self.stop.wait(0.1)


def loader_of(proc: subprocess.Popen[bytes]) -> psutil.Process | None:
    for child in psutil.Process(proc.pid).children():
        try:
            if "etlstage-spark-load" in (os.path.basename(a) for a in child.cmdline()[:2]):
                return child
        except psutil.Error:
            pass
    return None


@pytest.mark.parametrize("where", ["local", "s3"])
def test_a_reader_sees_whole_batches_while_the_loader_is_killed_mid_commit(tmp_path: Path, where: str) -> None:
    with lake(where, tmp_path) as table:
        readers_see_whole_batches(tmp_path, table)


def readers_see_whole_batches(tmp_path: Path, table: Lake) -> None:
    seed = int(os.environ.get("ETLSTAGE_CRASH_SEED", "3"))
    rng = random.Random(seed)
    data = tmp_path / "in.jsonl"
    data.write_text("".join(json.dumps({"id": i, "name": f"n{i}"}) + "\n" for i in range(IDS)))
    (tmp_path / "stages.yaml").write_text(
        f"""
stages:
  - {{name: src, type: E, mode: cyclic, command: [{PY}, {FIXTURES / "lines.py"}, {data}, "{PER_WINDOW}"]}}
  - {{name: load, type: L, mode: batch, batch_size: {PER_WINDOW},
     command: [etlstage-spark-load, --format, delta, --output, "{table.output}", --columns, "id:long=/id",
               "name=/name", --key, /id, --master, "local[1]"{table.loader_args}],
     timeouts: {{startup: 600, request: 600}}}}
"""
    )
    poller = Poller(table)
    poller.start()
    kills = 0
    with open(tmp_path / "log.txt", "ab") as log:
        proc = subprocess.Popen(RUN_ONCE, cwd=tmp_path, stdout=log, stderr=log, env={**os.environ, **table.env})
        try:
            deadline = time.monotonic() + 1200  # a busy machine: each JVM start takes a minute
            while kills < KILLS and proc.poll() is None and time.monotonic() < deadline:
                commits = table.commits()
                if commits < 2 + kills * 2:  # the table made, a batch committed, and more after each kill
                    time.sleep(0.05)
                    continue
                time.sleep(rng.uniform(0.0, 1.5))  # somewhere in the next batches' MERGE and commit
                victim = loader_of(proc)
                if victim is not None:
                    victim.kill()
                    kills += 1
            assert proc.wait(timeout=max(1.0, deadline - time.monotonic())) == 0, (tmp_path / "log.txt").read_text()[
                -3000:
            ]
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            poller.stop.set()
            poller.join(timeout=30)
    assert kills == KILLS, f"seed {seed}: the run ended after {kills} kills"
    assert poller.snapshots > 0
    assert not poller.problems, f"seed {seed}: {poller.problems[:5]}"
    # every version a reader could have opened, not only those the poller happened to see
    last = table.version()
    versions = {v: whole_batches(table.ids(v)) for v in range(last + 1)}
    assert not {v: p for v, p in versions.items() if p}, f"seed {seed}: {versions}"
    assert Counter(table.ids()) == Counter(range(IDS)), f"seed {seed}"
