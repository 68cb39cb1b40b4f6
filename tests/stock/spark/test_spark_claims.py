"""Keys held by another instance's unfinished batch: the loader waits up to --claim-timeout
for that batch to commit (then skips the keys as duplicates), else stops naming it."""

from __future__ import annotations

import threading
import time

import pytest
from etlstage_workers.spark.config import LoaderConfig, parse_column
from etlstage_workers.spark.keystore import KeyStore
from etlstage_workers.spark.loader import ClaimTimeout, SparkLoader

from etlstage.protocol.scenario import Scenario

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]  # a JVM


def ids(start: int, n: int) -> list[bytes]:
    return [b'{"id":"e%d"}' % i for i in range(start, start + n)]


def instance_1(spark, tmp_path, claim_timeout: float) -> SparkLoader:
    config = LoaderConfig(
        output=str(tmp_path / "out"), columns=(parse_column("id=/id"),), key="/id", claim_timeout=claim_timeout
    ).check()
    loader = SparkLoader(config, spark=spark)
    loader.scenario = Scenario(
        type="L", mode="batch", batch_size=100, instance=1, instances=2, state_dir=str(tmp_path / "state")
    )
    loader.setup()
    return loader


def instance_0_holds(loader: SparkLoader, keys: list[str]) -> KeyStore:
    """Instance 0 (the same key index) with a claimed batch it has not finished."""
    store = KeyStore(loader.key_index_path())
    assert store.claim("i0-unfinished", 0, keys) == {}
    return store


def test_keys_held_by_another_instance_are_awaited_then_skipped_once_it_commits(spark, tmp_path) -> None:
    loader = instance_1(spark, tmp_path, claim_timeout=60)
    other = instance_0_holds(loader, [f"e{i}" for i in range(10)])
    threading.Timer(1.5, other.mark_committed, args=("i0-unfinished",)).start()
    started = time.monotonic()
    loader.load(ids(0, 20)).result(timeout=120)
    waited = time.monotonic() - started
    loader.teardown()
    assert waited >= 1.5, "the batch went on while another instance held some of its keys"
    written = sorted(r["id"] for r in spark.read.parquet(str(tmp_path / "out")).collect())
    assert written == sorted(f"e{i}" for i in range(10, 20))  # e0..e9 are the other batch's
    assert loader.report()["duplicates skipped"] == 10


def test_keys_held_past_the_claim_timeout_stop_the_batch_naming_the_holder(spark, tmp_path) -> None:
    loader = instance_1(spark, tmp_path, claim_timeout=1)
    other = instance_0_holds(loader, [f"e{i}" for i in range(10)])
    started = time.monotonic()
    with pytest.raises(ClaimTimeout) as err:
        loader.load(ids(5, 10)).result(timeout=120)
    assert time.monotonic() - started >= 1
    loader.teardown()
    assert str(err.value).startswith(
        "5 keys stay held by unfinished batches i0-unfinished of another instance for 1s; restart that instance"
    )
    # nothing of the stopped batch stays claimed: its new keys are free for the batch sent again
    assert other.claim("i0-next", 0, [f"e{i}" for i in range(10, 15)]) == {}
