"""The demo's emulator: CLI seeding a stream from a JSONL file; the worker reads it via env alone."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from etlstage_workers.kinesis.emulator import Emulator, partition_key_fn

ROOT = Path(__file__).resolve().parents[3]


def test_partition_keys_follow_rfc_6901_and_name_a_record_without_one() -> None:
    doc = b'{"a": {"b/c": [10, {"~k": "v"}]}, "": 7}'
    assert partition_key_fn("/a/b~1c/1/~0k")(0, doc) == "v"
    assert partition_key_fn("/")(0, doc) == "7"  # the member named "", not the document
    assert partition_key_fn(None)(3, doc) == "3"
    with pytest.raises(ValueError, match=r"record #5: nothing at JSON pointer '/a/x'"):
        partition_key_fn("/a/x")(5, doc)
    with pytest.raises(ValueError, match=r"record #6: not JSON"):
        partition_key_fn("/a")(6, b"{oops")


def test_cli_seeds_a_stream_and_the_worker_reads_it_with_env_only(tmp_path, spawn) -> None:
    lines = [json.dumps({"messageHeader": {"id": f"id-{i}"}, "n": i}) for i in range(1203)]
    data = tmp_path / "data.jsonl"
    data.write_text("\n".join(lines) + "\n\n")
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    emu = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "etlstage_workers.kinesis.emulator",
            "--stream",
            "demo",
            "--shards",
            "3",
            "--records",
            str(data),
            "--partition-key",
            "/messageHeader/id",
        ],
        stdout=subprocess.PIPE,
        stderr=open(tmp_path / "emu.log", "wb"),
        env=env,
    )
    try:
        assert emu.stdout
        url = emu.stdout.readline().decode().strip()
        assert url.startswith("http://127.0.0.1:")
        for _ in range(100):
            if b"put 1203 records into demo" in (tmp_path / "emu.log").read_bytes():
                break
            time.sleep(0.1)
        else:
            raise AssertionError((tmp_path / "emu.log").read_text())
        worker_env = Emulator(int(url.rsplit(":", 1)[1])).env()
        w = spawn(["--stream", "demo"], str(tmp_path / "state"), mode="plain", extra_env=worker_env)
        got = [json.loads(m) for m in w.read_all()]
        assert sorted(d["n"] for d in got) == list(range(1203))
        keys = {json.loads(r["Data"])["messageHeader"]["id"]: r["PartitionKey"] for r in _all(url)}
        assert all(k == v for k, v in keys.items()) and len(keys) == 1203
    finally:
        emu.send_signal(signal.SIGTERM)
        assert emu.wait(10) == 0


def _all(url: str) -> list[dict]:
    c = Emulator(int(url.rsplit(":", 1)[1])).client()
    out = []
    for s in c.list_shards(StreamName="demo")["Shards"]:
        it = c.get_shard_iterator(StreamName="demo", ShardId=s["ShardId"], ShardIteratorType="TRIM_HORIZON")
        out += c.get_records(ShardIterator=it["ShardIterator"])["Records"]
    return out


def test_python_api(tmp_path) -> None:
    with Emulator() as emu:
        emu.create_stream("api", shards=2)
        assert emu.put_records("api", (b'{"k": %d}' % i for i in range(1001)), partition_key="/k") == 1001
        shards = emu.client().list_shards(StreamName="api")["Shards"]
        assert len(shards) == 2
