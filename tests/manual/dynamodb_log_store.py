"""Two loader instances write one Delta table on S3 through Delta's DynamoDB log store
(``--dynamodb-log-table``), under the supervisor engine and then under the Spark engine,
against moto on loopback: every id once in the table (read
with delta-rs), and the DynamoDB table holds an entry for each commit of the table's log,
so the commits went through the log store.

Not in the suite (its file name is no test_*.py): the registry the project's machines reach
does not serve the log store's jar, so here it could only skip. Run it by hand where the
``delta-dynamodb`` set can be fetched or is in ``ETLSTAGE_JAR_CACHE``::

    python -m pytest tests/manual/dynamodb_log_store.py

It skips, saying why, when the set cannot be had (docs/workers/spark.md, "Concurrent
writers"). moto serves S3 here over HTTP and DynamoDB over HTTPS (a second
server): Delta 4.4's log store has no endpoint setting and its AWS SDK v1 reads no
``AWS_ENDPOINT_URL_DYNAMODB``, so the SDK's own regions override (a system property naming
an XML file) sends DynamoDB to loopback, over HTTPS, the client's protocol, with the
SDK's certificate check off for moto's made-up certificate."""

from __future__ import annotations

import json
import re
import shutil
from collections import Counter
from pathlib import Path

import pytest

from etlstage.spark.setup import jars
from tests.conftest import PY
from tests.support.paths import FIXTURES
from tests.support.run_cli import etlstage
from tests.support.s3 import FAKE_CREDENTIALS, S3Server, moto_s3

pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(1500),
    pytest.mark.filterwarnings("ignore::urllib3.exceptions.InsecureRequestWarning"),  # moto's certificate
]
IDS = 60
PER_WINDOW = 10
LOG_TABLE = "etl_delta_log"


def log_store_jars() -> None:
    try:
        jars.fetch_named("delta-dynamodb")
    except jars.JarFetchError as exc:
        text = re.sub(r"\x1b\[[0-9;]*m", "", str(exc))  # mvn's colours
        why = [line.strip() for line in text.splitlines() if "Could not" in line] or text.splitlines()[:1]
        pytest.skip(f"Delta's DynamoDB log store cannot be fetched here: {why[0][:500]}")


def regions_override(path: Path, dynamodb: S3Server) -> Path:
    """The AWS SDK v1's regions file (``com.amazonaws.regions.RegionUtils.fileOverride``):
    DynamoDB of the region the log store uses at moto's address."""
    host = dynamodb.endpoint.split("://", 1)[1]
    path.write_text(
        f"""<?xml version="1.0" encoding="UTF-8"?>
<XmlRegionMetadata><Regions><Region><Name>{FAKE_CREDENTIALS["AWS_REGION"]}</Name>
<Endpoint><ServiceName>dynamodb</ServiceName><Http>false</Http><Https>true</Https><Hostname>{host}</Hostname></Endpoint>
</Region></Regions></XmlRegionMetadata>
"""
    )
    return path


def pipeline(tmp_path: Path, ids: list[int], conf: dict[str, str]) -> None:
    """Two loader instances with the log store; the settings both as the worker's ``--conf``
    and as ``engine.conf`` (the Spark engine's session ignores the worker's)."""
    data = tmp_path / "in.jsonl"
    data.write_text("".join(json.dumps({"id": i, "name": f"n{i}"}) + "\n" for i in ids))
    worker_conf = ", ".join(f'--conf, "{k}={v}"' for k, v in conf.items())
    engine_conf = ", ".join(f'"{k}": "{v}"' for k, v in conf.items())
    (tmp_path / "stages.yaml").write_text(
        f"""
engine: {{conf: {{{engine_conf}}}}}
stages:
  - {{name: src, type: E, mode: cyclic, command: [{PY}, {FIXTURES / "lines.py"}, {data}, "{PER_WINDOW}"]}}
  - {{name: load, type: L, mode: batch, batch_size: 5, instances: 2,
     command: [etlstage-spark-load, --format, delta, --output, "s3a://lake/out", --columns, "id:long=/id",
               "name=/name", --key, /id, --master, "local[1]", --dynamodb-log-table, {LOG_TABLE},
               --dynamodb-region, {FAKE_CREDENTIALS["AWS_REGION"]}, {worker_conf}],
     timeouts: {{startup: 600, request: 600}}}}
"""
    )


def loaded(s3: S3Server) -> Counter[int]:
    from deltalake import DeltaTable

    table = DeltaTable("s3://lake/out", storage_options=s3.storage_options())
    return Counter(table.to_pyarrow_table(columns=["id"]).column("id").to_pylist())


def through_the_log_store(s3: S3Server, ddb: S3Server) -> int:
    """Every commit of the table's log has its entry in the DynamoDB table, complete; how many."""
    commits = sorted(k.rsplit("/", 1)[1] for k in s3.keys("lake", "out/_delta_log/") if k.endswith(".json"))
    entries = ddb.client("dynamodb").scan(TableName=LOG_TABLE, ConsistentRead=True)["Items"]
    logged = sorted(e["fileName"]["S"] for e in entries if e["tablePath"]["S"].endswith("lake/out"))
    assert logged == commits, (logged, commits, entries[:2])
    assert all(e["complete"]["S"] == "true" for e in entries)
    return len(commits)


def test_two_instances_load_each_id_once_through_the_dynamodb_log_store_on_both_engines(tmp_path: Path) -> None:
    log_store_jars()
    aside = tmp_path.parent / f"{tmp_path.name}-moto"  # the servers' logs outside the pipeline's folder
    with moto_s3(aside) as s3, moto_s3(aside, tls=True) as ddb:
        s3.create_bucket("lake")
        regions = regions_override(tmp_path / "regions.xml", ddb)
        java = (
            f"-Dcom.amazonaws.regions.RegionUtils.fileOverride={regions} -Dcom.amazonaws.sdk.disableCertChecking=true"
        )
        conf = {**s3.spark_conf(), "spark.driver.extraJavaOptions": java}

        pipeline(tmp_path, [*range(IDS), *range(0, IDS, 7)], conf)  # some ids twice: kept once
        first = etlstage(tmp_path, "run", "--once", "--no-progress", "stages.yaml", timeout=900, env=s3.env())
        assert first.code == 0, first.stderr[-4000:]
        for instance in ("load#0", "load#1"):  # both wrote the table
            assert any(f"[{instance}]" in line and "rows inserted" in line for line in first.stderr.splitlines())
        assert loaded(s3) == Counter(range(IDS))
        assert through_the_log_store(s3, ddb) >= 3  # the table made, and batches of both instances

        pipeline(tmp_path, list(range(IDS + 20)), conf)
        shutil.rmtree(tmp_path / ".etlstage")  # everything is read again: the MERGE drops what is there
        second = etlstage(tmp_path, "run", "--engine", "spark", "--master", "local[2]", "--once", "--no-progress",
                          "stages.yaml", timeout=900, env=s3.env())  # fmt: skip
        assert second.code == 0, second.stderr[-4000:]
        assert loaded(s3) == Counter(range(IDS + 20))
        through_the_log_store(s3, ddb)
