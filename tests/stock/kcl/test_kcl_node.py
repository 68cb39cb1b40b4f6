"""A record processor in a second language (Node.js, no npm packages), protocol V1 and V2,
in the etlstage scenarios the adapter supports."""

from __future__ import annotations

import sqlite3

import pytest

from tests.support.kcl import BNC, CHILDREN, EOB, EOP, batches_to_bytes, envelope, run_adapter, shard_end

pytestmark = pytest.mark.timeout(120)
CHILD = ["node", str(CHILDREN / "mld_child.js")]


@pytest.mark.parametrize("version", [1, 2])
def test_node_child_both_protocol_versions(tmp_path, version):
    messages = [envelope("shardId-000000000003", n, f"e{n}") for n in range(1, 1201)] + [
        f"p{n}".encode() for n in range(800)
    ]
    messages.insert(1200, shard_end("shardId-000000000003"))
    batches = [messages[i : i + 50] for i in range(0, len(messages), 50)]
    run = run_adapter(
        tmp_path,
        [*CHILD, f"v{version}"],
        batches_to_bytes(batches),
        batch_size=50,
        adapter_args=["--protocol-version", str(version)],
        env={"KCL_TEST_CHECKPOINT_EVERY": "200"},
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.count(EOP) == len(batches)
    records = run.records()
    assert [r[5] for r in records] == [f"e{n}" for n in range(1, 1201)] + [f"p{n}" for n in range(800)]
    if version == 1:  # V1 records carry no V2 fields (the child rejects them)
        assert {r[2] for r in records} == {"undefined"} and {r[4] for r in records} == {"undefined"}
        assert sorted(e[1:] for e in run.events("shutdown")) == [
            ["shardId-000000000000", "ZOMBIE"],
            ["shardId-000000000003", "TERMINATE"],
        ]
        assert run.events("initialize")[0][2:] == ["undefined", "undefined"]
    else:
        assert {r[2] for r in records} == {"0"}
        assert records[0][4] == str(1700000000001)
        assert run.events("shard_ended") == [["shard_ended", "shardId-000000000003"]]
        assert run.events("lease_lost") == [["lease_lost", "shardId-000000000000"]]
        assert run.events("initialize")[0][2:] == ["TRIM_HORIZON", "0"]
    assert len(run.events("checkpoint-ok")) >= 9 and not run.events("checkpoint-error")
    assert "not JSON: processed 50 records" in run.stderr  # logged, not fatal
    db = sqlite3.connect(tmp_path / "state" / "kcl-multilang.sqlite")
    stored = dict(db.execute("SELECT shard_id, sequence_number FROM kcl_checkpoint"))
    assert stored["shardId-000000000003"] == "SHARD_END"


def test_loader_stage_has_no_results(tmp_path):
    run = run_adapter(tmp_path, [*CHILD, "v2"], batches_to_bytes([[b"a", b"b"], [b"c"]]), stage_type="L")
    assert run.returncode == 0, run.stderr
    assert run.stdout == EOP + EOP
    assert [r[5] for r in run.records()] == ["a", "b", "c"]


def test_single_mode(tmp_path):
    run = run_adapter(tmp_path, [*CHILD, "v2"], b"a\nb\n", mode="single", batch_size=1)
    assert run.returncode == 0, run.stderr
    assert run.stdout == b"a\n" + EOP + b"b\n" + EOP
    assert [r[1] for r in run.records()] == ["00000000000000000001", "00000000000000000002"]


def test_worker_driven_batches(tmp_path):
    run = run_adapter(tmp_path, [*CHILD, "v2"], b"a\nb\nc\nd\n" + EOB, batch_driver="worker", batch_size=3)
    assert run.returncode == 0, run.stderr
    assert run.stdout == BNC + BNC + b"a\nb\nc\n" + EOP + BNC + b"d\n" + EOP
    assert [r[5] for r in run.records()] == ["a", "b", "c", "d"]


def test_base64_envelope_and_iso_timestamp(tmp_path):
    msg = envelope(
        "shardId-000000000001", 5, "aMOpbGxv", dataEncoding="base64", approximateArrivalTimestamp="2024-01-01T00:00:00Z"
    )
    run = run_adapter(tmp_path, [*CHILD, "v2"], batches_to_bytes([[msg]]))
    assert run.returncode == 0, run.stderr
    assert run.records() == [["shardId-000000000001", f"{5:056d}", "0", "pk-5", "1704067200000", "héllo"]]


@pytest.mark.parametrize("parallel", ["1", "4"])
def test_many_shards_one_after_the_other_or_at_once(tmp_path, parallel):
    shards = [f"shardId-{i:012d}" for i in range(1, 7)]
    messages = [envelope(shards[n % 6], n, f"m{n}") for n in range(600)] + [shard_end(s) for s in shards[:3]]
    batches = [messages[i : i + 60] for i in range(0, len(messages), 60)]
    run = run_adapter(
        tmp_path, [*CHILD, "v2"], batches_to_bytes(batches), batch_size=60, adapter_args=["--parallel-shards", parallel]
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout == b"".join(b"".join(m + b"\n" for m in b) + EOP for b in batches)
    records = run.records()
    for shard in shards:
        assert [r[5] for r in records if r[0] == shard] == [f"m{n}" for n in range(600) if shards[n % 6] == shard]
    assert sorted(e[1] for e in run.events("shard_ended")) == shards[:3]
    assert sorted(e[1] for e in run.events("lease_lost")) == shards[3:]


def test_v2_records_with_legacy_shutdown(tmp_path):
    """erlmld's V2: V2 records and checkpoints, but shard and lease ends as `shutdown` + reason."""
    messages = [envelope("shardId-000000000005", n, f"e{n}") for n in range(1, 5)] + [
        shard_end("shardId-000000000005"),
        b"plain",
    ]
    run = run_adapter(tmp_path, [*CHILD, "v2"], batches_to_bytes([messages]), adapter_args=["--legacy-shutdown"])
    assert run.returncode == 0, run.stderr
    assert {r[2] for r in run.records()} == {"0"}
    assert sorted(e[1:] for e in run.events("shutdown")) == [
        ["shardId-000000000000", "ZOMBIE"],
        ["shardId-000000000005", "TERMINATE"],
    ]
    assert not run.events("shard_ended") and not run.events("lease_lost")
    db = sqlite3.connect(tmp_path / "state" / "kcl-multilang.sqlite")
    assert (
        dict(db.execute("SELECT shard_id, sequence_number FROM kcl_checkpoint"))["shardId-000000000005"] == "SHARD_END"
    )


def test_no_input_no_child(tmp_path):
    run = run_adapter(tmp_path, [*CHILD, "v2"], b"")
    assert run.returncode == 0, run.stderr
    assert run.stdout == b"" and "started MLD child" not in run.stderr
