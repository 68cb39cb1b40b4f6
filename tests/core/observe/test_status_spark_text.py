"""`etlstage status` after a Spark run: the Spark engine's status document, rendered by the
renderer the supervisor's goes through (its checkpoint first), with no JVM: the checkpoint's
files are laid out as Spark writes them."""

from __future__ import annotations

from pathlib import Path

from etlstage.config.loader import load_config
from etlstage.observe.status import render
from etlstage.spark.driver.live import status_document
from tests.core.spark.test_spark_checkpoint_check import COMMIT, OFFSETS, _write
from tests.support.run_cli import etlstage

STAGES = """
engine: {kind: spark}
stages:
  - {name: ext, type: E, mode: cyclic, command: [cat]}
  - {name: load, type: L, command: [cat]}
"""


def test_status_of_a_spark_run_is_rendered_as_the_supervisors(tmp_path: Path) -> None:
    (tmp_path / "stages.yaml").write_text(STAGES)
    checkpoint = tmp_path / ".etlstage" / "stages" / "spark-checkpoint"
    _write(checkpoint / "metadata", b'{"id":"0f2c"}\n')
    for n in (0, 1):
        _write(checkpoint / "offsets" / str(n), OFFSETS)
    _write(checkpoint / "commits" / "0", COMMIT)  # batch 1 in flight

    shown = etlstage(tmp_path, "status", "stages.yaml")
    assert shown.code == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert lines[:4] == [
        "engine: spark",
        f"checkpoint: {checkpoint}",
        lines[2],
        "in flight: #1 (replayed with the same offsets if the query stopped)",
    ]
    assert lines[2].startswith("micro-batches committed: 1 (last #0 at 20"), lines[2]
    assert '  ext                  offset {"seq": 1}' in lines
    # what the supervisor's status says too, from the same renderer
    assert "running: no" in lines and "dead letters: 0 (0 new)" in lines, shown.stdout
    assert any(line.startswith("state: ") for line in lines)
    config = load_config(str(tmp_path / "stages.yaml"))
    expected = render(status_document(config), str(Path(config.state_dir) / "state.db"))

    def timeless(text: list[str]) -> list[str]:
        return [line for line in text if "at 20" not in line and ", open " not in line]

    assert timeless(lines) == timeless(expected)


def test_a_spark_pipeline_with_no_batch_yet_says_so(tmp_path: Path) -> None:
    (tmp_path / "stages.yaml").write_text(STAGES)
    shown = etlstage(tmp_path, "status", "stages.yaml")
    assert shown.code == 0, shown.stderr
    assert shown.stdout.splitlines()[:2] == [
        "engine: spark",
        f"checkpoint: {tmp_path / '.etlstage' / 'stages' / 'spark-checkpoint'} (no micro-batch yet)",
    ]
    assert "running: no" in shown.stdout


def test_status_reads_a_checkpoint_on_s3(tmp_path: Path) -> None:
    """A checkpoint on s3a:// (moto's S3 on loopback), read with the pipeline's own S3A
    settings and the AWS chain's credentials: the same lines as from a local folder."""
    import json

    from tests.support.s3 import moto_s3

    with moto_s3(tmp_path / "s3") as s3:
        s3.create_bucket("lake")
        client = s3.client()
        for key, data in (
            ("ck/metadata", b'{"id":"0f2c"}\n'),
            ("ck/offsets/0", OFFSETS),
            ("ck/offsets/1", OFFSETS.replace(b'{"seq": 1}', b'{"seq": 2}')),
            ("ck/commits/0", COMMIT),
        ):
            client.put_object(Bucket="lake", Key=key, Body=data)
        engine = {"kind": "spark", "checkpoint": "s3a://lake/ck", "conf": s3.spark_conf()}
        (tmp_path / "stages.yaml").write_text(STAGES.replace("engine: {kind: spark}", f"engine: {json.dumps(engine)}"))
        shown = etlstage(tmp_path, "status", "stages.yaml", env=s3.env())
        assert shown.code == 0, shown.stderr
        lines = shown.stdout.splitlines()
        assert lines[1] == "checkpoint: s3a://lake/ck", shown.stdout
        assert lines[2].startswith("micro-batches committed: 1 (last #0 at 20"), lines[2]
        assert lines[3] == "in flight: #1 (replayed with the same offsets if the query stopped)"
        assert '  ext                  offset {"seq": 2}' in lines  # the last planned batch's

    # the server gone: said, not shown as "no micro-batch yet"
    refused = etlstage(tmp_path, "status", "stages.yaml", env=s3.env())
    assert refused.code == 0, refused.stderr
    assert refused.stdout.splitlines()[1].startswith("checkpoint: s3a://lake/ck (cannot read it: "), refused.stdout


def test_a_checkpoint_on_another_file_system_is_said_to_be_unread(tmp_path: Path) -> None:
    (tmp_path / "stages.yaml").write_text(
        STAGES.replace("engine: {kind: spark}", "engine: {kind: spark, checkpoint: 'hdfs://nn:8020/ck'}")
    )
    shown = etlstage(tmp_path, "status", "stages.yaml")
    assert shown.code == 0, shown.stderr
    assert (
        shown.stdout.splitlines()[1] == "checkpoint: hdfs://nn:8020/ck (not read from here (only local paths and S3))"
    )


def test_a_running_drivers_figures_do_not_read_an_s3_checkpoint_and_say_so(tmp_path: Path) -> None:
    """At each refresh of a run's page the S3 checkpoint is not listed (a request per refresh):
    the page says where to look instead of showing "no micro-batch yet"."""
    from etlstage.spark.driver.status import read_checkpoint

    (tmp_path / "stages.yaml").write_text(
        STAGES.replace("engine: {kind: spark}", "engine: {kind: spark, checkpoint: 's3a://lake/ck'}")
    )
    unread = read_checkpoint(load_config(str(tmp_path / "stages.yaml"))).unread
    assert unread == "on S3: `etlstage status` reads it, a running driver's figures do not"
