"""Delta's idempotent-write pair on its own: a batch committed under (application id,
version) is not committed again, whatever rows the replay holds.

The MERGE by key also drops a replay of the same rows, so a replay test cannot tell the
two apart; here the "replay" carries keys the table lacks, which the MERGE alone would
insert. Run in its own process: the Delta jars and SQL extension are set at session start.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.lake_script import run_lake_script

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

SCRIPT = """
def batch(first):
    return prepare([rdss(i) for i in range(first, first + 3)], config), [0, 1, 2]

def commit(first, version):
    return lake.commit_batch(spark, config, out, *batch(first), lake.Txn("etlstage-test-app", version))["total"]

print(json.dumps({
    "v7": commit(1, 7),
    "v7 again, new keys": commit(11, 7),
    "v6, new keys": commit(21, 6),
    "v8, new keys": commit(31, 8),
    "no pair, new keys": lake.commit_batch(spark, config, out, *batch(41))["total"],
}))
"""


def test_a_committed_version_is_skipped_even_with_rows_the_merge_would_insert(tmp_path: Path) -> None:
    from deltalake import DeltaTable

    out = tmp_path / "rdss"
    inserted = run_lake_script(SCRIPT, out)
    assert inserted == {
        "v7": 3,
        "v7 again, new keys": 0,  # the pair alone: the MERGE would have inserted these 3
        "v6, new keys": 0,  # an older version of the same application: a late replay
        "v8, new keys": 3,
        "no pair, new keys": 3,  # the rows themselves were insertable all along
    }, inserted
    table = DeltaTable(str(out / "valid")).to_pyarrow_table(columns=["messageId"])
    numbers = sorted(int(m.rsplit("-", 1)[1]) for m in table.column("messageId").to_pylist())
    assert numbers == [1, 2, 3, 31, 32, 33, 41, 42, 43]


ROUTED = """
def batch(first):
    # valid, invalid (an errorCode) and error (not JSON) rows: three tables merged at once
    messages = [rdss(first), rdss(first + 1, "GENERR001"), b"not json %d" % first]
    return prepare(messages, config), [0, 1, 2]

app = "etlstage-test-routed"
first = {v: lake.commit_batch(spark, config, out, *batch(100 * v), lake.Txn(app, v)) for v in range(1, 7)}
again = {v: lake.commit_batch(spark, config, out, *batch(100 * v + 50), lake.Txn(app, v)) for v in range(1, 7)}
print(json.dumps({"first": first, "again": again}))
"""


LOADER = """
import io, os
from deltalake import DeltaTable
from etlstage_workers.spark.loader import SparkLoader
from etlstage.protocol.scenario import Scenario
from etlstage.worker import serve

def batches(*pairs):  # (id, first message number): three valid RDSS messages each
    return io.BytesIO(b"".join(
        b"etlstage-batch-id " + bid.encode() + b"\\n" + b"".join(rdss(i) + b"\\n" for i in range(f, f + 3)) + b"\\x17"
        for bid, f in pairs))

os.makedirs(out + "-state")

def load(*pairs):
    scenario = Scenario(type="L", mode="batch", batch_size=1000, stage="load", state_dir=out + "-state", batch_id=True)
    acks = io.BytesIO()
    serve(SparkLoader(config, spark=spark), stdin=batches(*pairs), stdout=acks, scenario=scenario)
    ids = DeltaTable(out + "/valid").to_pyarrow_table(columns=["messageId"]).column("messageId").to_pylist()
    return {"acks": len(acks.getvalue()), "numbers": sorted(int(m.rsplit("-", 1)[1]) for m in ids)}

x, y = "a" * 32, "b" * 32
print(json.dumps({
    "first": load((x, 1), (x, 11)),  # the second carries new keys under a committed id
    "after a restart": load((x, 11), (y, 11)),
    "retention": DeltaTable(out + "/valid").metadata().configuration.get("delta.setTransactionRetentionDuration"),
}))
"""


def test_the_loaders_batch_id_is_the_pair_on_the_supervisor_engine(tmp_path: Path) -> None:
    """Under the supervisor, a batch with an id (stage key ``batch_id: true``) commits under
    Delta's pair (the id, 0): a batch sent again with that id — here with new keys, which
    the MERGE alone would insert — is skipped by Delta, in the same process or a new one;
    another id loads them. The tables keep the pairs for 7 days (the session's default for
    the tables it creates), so a pair per batch does not grow their state for ever."""
    got = run_lake_script(LOADER, tmp_path / "rdss")
    assert got["first"] == {"acks": 2, "numbers": [1, 2, 3]}, got
    assert got["after a restart"] == {"acks": 2, "numbers": [1, 2, 3, 11, 12, 13]}, got
    assert got["retention"] == "interval 7 days", got


def test_each_table_of_a_batch_merged_at_once_carries_the_pair(tmp_path: Path) -> None:
    """A batch's three tables are merged at the same time, each in its own session: every
    one of them commits under the batch's pair, so a replay with new keys inserts nothing in
    any table (sharing one session, a MERGE that ends clears the pair under another)."""
    out = tmp_path / "rdss"
    got = run_lake_script(ROUTED, out, master="local[2]")
    assert all(c == {"total": 3, "valid": 1, "invalid": 1, "error": 1} for c in got["first"].values()), got
    assert all(c["total"] == 0 for c in got["again"].values()), got["again"]


BIG_ROWS = """
import logging, os, tempfile
tempfile.tempdir = sys.argv[1] + "-tmp"
os.makedirs(tempfile.tempdir)
spark.sparkContext.setLogLevel("WARN")
said = []

class Keep(logging.Handler):
    def emit(self, record):
        said.append(record.getMessage())

logging.getLogger("etlstage.spark.jvm").addHandler(Keep(logging.WARNING))

def batch(first):  # ~6 MB of rows: 3,000 messages of ~2 KB, valid and invalid
    messages = [rdss(i, "GENERR001" if i % 5 == 0 else None, {"text": "x" * 2000, "n": i})
                for i in range(first, first + 3000)]
    return prepare(messages, config), list(range(3000))

counts = [lake.commit_batch(spark, config, out, *batch(f))["total"] for f in (0, 10000, 10000)]
ours = [s for s in said if "very large size" in s]
lake.reads_local_files = lambda _spark: False  # the rows through createDataFrame, as before
before = lake.commit_batch(spark, config, out, *batch(20000))["total"]
import time
deadline = time.monotonic() + 30  # the relay thread logs the JVM's lines as they come
while len([s for s in said if "very large size" in s]) == len(ours) and time.monotonic() < deadline:
    time.sleep(0.05)
print(json.dumps({"counts": counts, "ours": ours, "before": before,
                  "large before": [s for s in said if "very large size" in s][len(ours):],
                  "left": os.listdir(tempfile.tempdir)}))
"""


def test_a_batchs_rows_reach_the_merge_in_a_file_not_inside_a_task(tmp_path: Path) -> None:
    """A local master reads the batch from a Parquet file: no task carries the rows (Spark
    warned of a task of 3-6 MB per batch when createDataFrame put them in one)."""
    said = run_lake_script(BIG_ROWS, tmp_path / "rdss")
    assert said["counts"] == [3000, 3000, 0] and said["before"] == 3000, said
    assert said["ours"] == [], said["ours"]
    assert said["large before"], "createDataFrame's task was expected to be large (the check could not fail)"
    assert said["left"] == []  # each batch's file is removed once it is merged
