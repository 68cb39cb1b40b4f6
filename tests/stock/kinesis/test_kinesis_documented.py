"""Options and promises of docs/workers/kinesis.md, each against moto on loopback: the option
as the command line reads it, the effect in the worker's output."""

from __future__ import annotations

import base64
import io
import json

import pytest
from etlstage_workers.kinesis import kpl
from etlstage_workers.kinesis.extractor import KinesisExtractor
from etlstage_workers.kinesis.options import build_parser, options_from_args

from etlstage.errors import MarkerInMessage
from etlstage.protocol import Scenario
from etlstage.worker import serve
from tests.stock.kinesis.test_kinesis_moto import ids, records, run_plain

FAKE_SECRET = "wJalrXUtnFEMI-test-secret-never-logged"
FAKE_TOKEN = "IQoJb3JpZ2luX2VjE-test-session-token-never-logged"


def cli_options(stream: str, url: str, *args: str):
    """Options exactly as `etlstage-kinesis` builds them from its command line."""
    argv = ["--stream", stream, "--endpoint-url", url, "--region", "us-east-1", "--idle-sleep", "0", *args]
    return options_from_args(build_parser().parse_args(argv))


def test_no_deaggregate_passes_kpl_records_on_as_they_are(emulator, stream) -> None:
    s = stream(1)
    blob = kpl.aggregate([(f"u{i}", b"sub%d" % i) for i in range(3)])
    emulator.client().put_record(StreamName=s, PartitionKey="outer", Data=blob)
    (doc,) = [json.loads(m) for m in run_plain(cli_options(s, emulator.endpoint_url, "--envelope", "--no-deaggregate"))]
    assert base64.b64decode(doc["data"]) == blob and doc["subSequenceNumber"] == 0 and doc["partitionKey"] == "outer"
    deaggregated = run_plain(cli_options(s, emulator.endpoint_url, "--envelope"))
    assert [json.loads(m)["data"] for m in deaggregated] == ["sub0", "sub1", "sub2"]


@pytest.mark.parametrize(
    ("encoding", "expected"),
    [
        ("auto", [("utf8", "héllo"), ("base64", "/wA=")]),
        ("base64", [("base64", base64.b64encode("héllo".encode()).decode()), ("base64", "/wA=")]),
    ],
)
def test_data_encoding_of_envelopes(emulator, stream, encoding, expected) -> None:
    s = stream(1)
    c = emulator.client()
    c.put_record(StreamName=s, PartitionKey="k", Data="héllo".encode())
    c.put_record(StreamName=s, PartitionKey="k", Data=b"\xff\x00")
    got = run_plain(cli_options(s, emulator.endpoint_url, "--envelope", "--data-encoding", encoding))
    assert [(d["dataEncoding"], d["data"]) for d in map(json.loads, got)] == expected


def test_data_encoding_utf8_refuses_bytes_that_are_not_utf8_naming_the_record(emulator, stream) -> None:
    s = stream(1)
    c = emulator.client()
    c.put_record(StreamName=s, PartitionKey="k", Data=b"text")
    seq = c.put_record(StreamName=s, PartitionKey="k", Data=b"\xff\x00")["SequenceNumber"]
    with pytest.raises(MarkerInMessage, match=f"record {seq}/0 of shardId-000000000000 is not UTF-8"):
        run_plain(cli_options(s, emulator.endpoint_url, "--envelope", "--data-encoding", "utf8"))


def test_max_gets_per_second_is_the_cap_per_shard(emulator, stream, proxy, tmp_path) -> None:
    s = stream(1)
    serve(
        KinesisExtractor(cli_options(s, proxy.endpoint_url, "--max-gets-per-second", "2")),
        stdin=io.BytesIO(b"\n" * 5),
        stdout=io.BytesIO(),
        scenario=Scenario(type="E", mode="cyclic", state_dir=str(tmp_path)),
    )
    calls = proxy.get_records_calls
    assert len(calls) >= 5  # each cycle at least one call; reading ahead polls on between cycles
    # stamped on arrival at the proxy (a little jitter); 5 per second would give 0.4 s
    assert all(calls[i + 2] - calls[i] >= 0.9 for i in range(len(calls) - 2)), calls


def test_offsets_supervisor_is_refused_with_the_reason(emulator, stream, spawn, tmp_path) -> None:
    w = spawn(
        ["--stream", stream(1), "--endpoint-url", emulator.endpoint_url, "--region", "us-east-1"],
        str(tmp_path),
        extra_env={"ETLSTAGE_OFFSETS": "supervisor"},
    )
    assert w.close_stdin() == 2
    assert "keeps its own per-shard checkpoints: use offsets: worker" in w.stderr()
    assert "Traceback" not in w.stderr()


@pytest.mark.parametrize(
    ("status", "error", "drop"),
    [(500, "InternalFailure", False), (503, "ServiceUnavailable", False), (0, "", True)],
    ids=["500", "503", "connection-closed"],
)
def test_server_and_network_errors_are_retried(emulator, stream, put_records, proxy, status, error, drop) -> None:
    s = stream(1)
    put_records(s, records(10))
    proxy.fail, proxy.status, proxy.error, proxy.drop = 2, status, error, drop
    got = run_plain(cli_options(s, proxy.endpoint_url, "--backoff-base-ms", "1"))
    assert sorted(ids(got)) == sorted(f"r{i}" for i in range(10))
    assert proxy.failed == 2


@pytest.mark.parametrize("level", ["INFO", "DEBUG"])
def test_credentials_are_never_logged(emulator, stream, put_records, spawn, tmp_path, level) -> None:
    """Neither the secret key nor the session token, at any log level, in a run that reads
    records and in one that fails (an unknown stream)."""
    s = stream(1)
    put_records(s, records(3))
    env = {"AWS_SECRET_ACCESS_KEY": FAKE_SECRET, "AWS_SESSION_TOKEN": FAKE_TOKEN, "ETLSTAGE_LOG_LEVEL": level}
    common = ["--endpoint-url", emulator.endpoint_url, "--region", "us-east-1"]
    w = spawn(["--stream", s, *common], str(tmp_path / "ok"), extra_env=env)
    assert len(w.cycle()) == 3
    assert w.close_stdin() == 0
    failed = spawn(["--stream", "no-such-stream", *common], str(tmp_path / "failed"), extra_env=env)
    assert failed.close_stdin() != 0
    for text in (w.stderr(), failed.stderr()):
        assert text.strip()
        assert FAKE_SECRET not in text and FAKE_TOKEN not in text
