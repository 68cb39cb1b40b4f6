"""A Delta table's first batch creates it: no MERGE into nothing, and still each key once.

The first batch into a missing table is written as the table's version 0 (no join); a
writer that finds the table there, or made by another writer after it looked, merges.
Both races are forced here by making the look say "no table" when there is one (the
window between the look and the write); a plain append would put the keys in twice.
Run in its own process: the Delta jars and SQL extension are set at session start.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.lake_script import run_lake_script

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

SCRIPT = """
real_exists = lake._exists

def commit(session, where, numbers):
    prepared = prepare([rdss(i) for i in numbers], config)
    return lake.commit_batch(session, config, where, prepared, list(range(len(numbers))))["total"]

# lake._exists answering "no table" to its first `times` calls (each waiting at `barrier`
# first: all writers past their look before any writes), then the truth
def looks_missing(times, barrier=None):
    lock, calls = threading.Lock(), [0]
    def look(session, path):
        with lock:
            calls[0] += 1
            lie = calls[0] <= times
        if not lie:
            return real_exists(session, path)
        if barrier is not None:
            barrier.wait(timeout=120)
        return False
    return look

got = {}
# 1. made after the look: the table exists, but the writer's look says it does not
got["first"] = commit(spark, out + "/late", [1, 2, 3])
lake._TABLES.clear()
lake._exists = looks_missing(1)
got["made meanwhile"] = commit(spark, out + "/late", [2, 3, 4, 5])

# 2. two writers of one new table, each past its look before either writes
lake._TABLES.clear()
lake._exists = looks_missing(2, threading.Barrier(2))
race = {}
def writer(name, numbers):
    race[name] = commit(spark.newSession(), out + "/race", numbers)
threads = [threading.Thread(target=writer, args=(n, nums)) for n, nums in (("a", [10, 11, 12, 13]), ("b", [12, 13, 14, 15]))]
for t in threads:
    t.start()
for t in threads:
    t.join(timeout=300)
got["race"] = race
print(json.dumps(got))
"""


def test_a_first_batch_creates_the_table_and_a_late_or_racing_writer_merges(tmp_path: Path) -> None:
    from deltalake import DeltaTable

    out = tmp_path / "rdss"
    got = run_lake_script(SCRIPT, out, master="local[2]")

    def numbers(table: str) -> list[int]:
        ids = DeltaTable(str(out / table / "valid")).to_pyarrow_table(columns=["messageId"]).column("messageId")
        return sorted(int(m.rsplit("-", 1)[1]) for m in ids.to_pylist())

    assert got["first"] == 3
    assert got["made meanwhile"] == 2, got  # 4 and 5: the writer merged into the table it did not see
    assert numbers("late") == [1, 2, 3, 4, 5]
    assert sorted(got["race"]) == ["a", "b"], got  # both writers finished
    assert sum(got["race"].values()) == 6, got  # one created the table, the other merged its new keys
    assert numbers("race") == [10, 11, 12, 13, 14, 15]
    # the first batch is the table's version 0: no empty creation commit before it
    log = sorted(p.name for p in (out / "late" / "valid" / "_delta_log").glob("*.json"))
    assert log == ["00000000000000000000.json", "00000000000000000001.json"], log
