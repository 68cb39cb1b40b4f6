"""The engine block and the --engine / --master flags: validated, overridden, clear errors (exit 2)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from etlstage.config.loader import parse_config
from etlstage.errors import ConfigError
from etlstage.spark.driver.config import apply_flags
from tests.conftest import PY, TW, PipelineDir

BASE = f"""
stages:
  - {{name: e, type: E, command: [{PY}, {TW}, count, "3"]}}
  - {{name: l, type: L, command: [{PY}, {TW}, append, out.txt]}}
"""


def config(extra: str = "", base_dir: str = "/p"):
    return parse_config(BASE + extra, "stages.yaml", base_dir=base_dir)


def test_defaults_are_the_supervisor_and_a_checkpoint_under_state_dir() -> None:
    e = config().engine
    assert (e.kind, e.master, e.conf, e.trigger) == ("supervisor", "local[*]", {}, 0.0)
    assert e.checkpoint == "/p/.etlstage/stages/spark-checkpoint"  # the pipeline's folder, named after the file


def test_the_block_is_read_and_paths_resolved() -> None:
    e = config(
        "engine: {kind: spark, master: 'local[2]', conf: {spark.executor.memory: 2g, spark.x: 3, spark.y: true},"
        " checkpoint: ck, trigger: 2.5}\n"
    ).engine
    assert (e.kind, e.master, e.trigger, e.checkpoint) == ("spark", "local[2]", 2.5, "/p/ck")
    assert e.conf == {"spark.executor.memory": "2g", "spark.x": "3", "spark.y": "true"}


@pytest.mark.parametrize(
    "block, expected",
    [
        ("engine: {kind: flink}", "engine.kind: 'flink' is not one of 'supervisor', 'spark'"),
        ("engine: {kind: spark, masters: x}", "engine.masters: unknown key 'masters'; did you mean 'master'?"),
        ("engine: {trigger: -1}", "engine.trigger: -1 is less than the minimum of 0"),
        ("engine: {conf: {spark.x: [1]}}", "engine.conf.spark.x"),
    ],
)
def test_bad_blocks_name_the_place(block: str, expected: str) -> None:
    with pytest.raises(ConfigError) as info:
        config(block + "\n")
    assert expected in str(info.value)


def test_flags_override_the_file() -> None:
    c = apply_flags(config("engine: {kind: supervisor, master: 'local[1]'}\n"), "spark", "local[3]")
    assert (c.engine.kind, c.engine.master) == ("spark", "local[3]")
    assert apply_flags(config("engine: {kind: spark}\n"), "supervisor", None).engine.kind == "supervisor"


def test_master_without_the_spark_engine_is_refused() -> None:
    with pytest.raises(ConfigError, match="--master 'local\\[2\\]' is for the Spark engine"):
        apply_flags(config(), None, "local[2]")


def test_what_spark_cannot_run_is_named() -> None:
    text = BASE.replace(
        "  - {name: l,",
        "  - {name: l2, type: L, instances: 2, command: [x]}\n  - {name: l,",
    )
    with pytest.raises(ConfigError) as info:
        apply_flags(parse_config(text), "spark", None)
    assert "stage 'l': under engine spark every L-stage shares the sink's partitions" in str(info.value)


def test_validate_checks_the_block(pdir: PipelineDir) -> None:
    pdir.write(BASE + "engine: {kind: spark, checkpoint: ''}\n")
    r = pdir.etlstage("validate")
    assert r.code == 2
    assert "stages.yaml:5: engine.checkpoint" in r.stderr
    pdir.write(BASE + "engine: {kind: spark, master: 'local[2]'}\n")
    r = pdir.etlstage("validate")
    assert r.code == 0, r.stderr


def test_run_master_without_engine_spark_exits_2(pdir: PipelineDir) -> None:
    pdir.write(BASE)
    r = pdir.etlstage("run", "--master", "local[2]", "--once", "--no-progress")
    assert r.code == 2
    assert "is for the Spark engine: add --engine spark" in r.stderr
    assert "Traceback" not in r.stderr


def test_missing_pyspark_is_a_clear_error(pdir: PipelineDir, tmp_path: Path) -> None:
    """A pyspark that cannot be imported (shadowed here by a package that raises ImportError)."""
    shadow = tmp_path / "shadow" / "pyspark"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("raise ImportError('No module named pyspark (shadowed by the test)')\n")
    pdir.write(BASE)
    env = {"PYTHONPATH": os.pathsep.join([str(shadow.parent), *sys.path])}
    r = pdir.etlstage("run", "--engine", "spark", "--once", "--no-progress", env=env)
    assert r.code == 2, r.stderr
    assert "pyspark is not installed" in r.stderr and "pip install 'etlstage[spark]'" in r.stderr
    assert "Traceback" not in r.stderr
    assert not (pdir.path / "out.txt").exists()


def test_sharded_supervisor_offsets_need_the_spark_engine() -> None:
    text = BASE.replace(
        "  - {name: e, type: E, command:",
        "  - {name: e, type: E, mode: cyclic, offsets: supervisor, offset_policy: {type: counter}, instances: 2, command:",
    )
    with pytest.raises(ConfigError, match="with instances > 1 need engine spark"):
        apply_flags(parse_config(text), None, None)
    assert apply_flags(parse_config(text), "spark", None).stages[0].instances == 2  # the flag decides
    spark = parse_config(text + "engine: {kind: spark}\n")
    assert apply_flags(spark, None, None).stages[0].instances == 2
    with pytest.raises(ConfigError, match="with instances > 1 need engine spark"):
        apply_flags(spark, "supervisor", None)


def test_ship_paths_are_resolved_checked_and_named_when_wrong(pdir: PipelineDir, tmp_path: Path) -> None:
    (tmp_path / "tools").mkdir()
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "tools").write_text("a file of the same name\n")
    e = config("engine: {kind: spark, ship: [tools, /abs/x.py]}\n", base_dir=str(tmp_path)).engine
    assert e.ship == [str(tmp_path / "tools"), "/abs/x.py"]
    pdir.write(BASE + "engine: {kind: spark, ship: [tools, nowhere.sh, other/tools]}\n")
    r = pdir.etlstage("validate")
    assert r.code == 2 and "Traceback" not in r.stderr, r
    assert (
        f"engine.ship: {tmp_path / 'nowhere.sh'} does not exist (paths are relative to the pipeline file)" in r.stderr
    )
    assert f"engine.ship: {tmp_path / 'other' / 'tools'} and {tmp_path / 'tools'} have the same name 'tools'" in (
        r.stderr
    )
    pdir.write(BASE + "engine: {kind: spark, ship: tools}\n")
    r = pdir.etlstage("validate")
    assert r.code == 2 and "engine.ship" in r.stderr and "is not a list" in r.stderr, r


def test_the_spark_engine_runs_the_pipelines_services_and_stops_them(tmp_path: Path) -> None:
    """The driver has no event loop: services get one of their own, exports reach the stages."""
    from etlstage.spark.driver.services import running_services

    (tmp_path / "svc.py").write_text(
        "import os, sys, time\n"
        "open('svc.pid', 'w').write(str(os.getpid()))\n"
        "print('ENDPOINT=http://127.0.0.1:4567'); print('READY', flush=True)\n"
        "for i in range(100000): print('chatter', i)\n"  # read after READY, or it blocks
        "sys.stdout.flush(); time.sleep(60)\n"
    )
    cfg = parse_config(
        BASE + f"services:\n  - {{name: prep, ready: exit, command: [{PY}, -c, \"open('prepared', 'w')\"]}}\n"
        f"  - {{name: svc, command: [{PY}, svc.py]}}\n",
        "stages.yaml",
        base_dir=str(tmp_path),
    )
    with running_services(cfg, {}) as exports:
        assert exports == {"ENDPOINT": "http://127.0.0.1:4567"}
        assert (tmp_path / "prepared").exists()
        pid = int((tmp_path / "svc.pid").read_text())
        os.kill(pid, 0)  # running
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_what_a_crash_left_half_written_in_the_spark_checkpoint_is_removed(tmp_path: Path) -> None:
    """A driver killed while Spark wrote its first offset entry left a temporary file, and
    Spark then refuses the checkpoint for good; committed entries stay as they are."""
    from etlstage.spark.checkpoint import remove_abandoned

    offsets, commits = tmp_path / "offsets", tmp_path / "commits"
    offsets.mkdir()
    commits.mkdir()
    tmp = ".0.3c39a824-8032-47d8-aef9-cec641e10f2f.tmp"
    for name in (tmp, "." + tmp + ".crc", "0", ".0.crc"):
        (offsets / name).write_text("x")
    (commits / ".1.3c39a824-8032-47d8-aef9-cec641e10f2f.tmp").write_text("")
    removed = remove_abandoned(tmp_path)
    assert sorted(removed) == sorted([f"offsets/{tmp}", f"offsets/.{tmp}.crc", f"commits/.1.{tmp[3:]}"])
    assert sorted(p.name for p in offsets.iterdir()) == [".0.crc", "0"]
    assert remove_abandoned(tmp_path / "nothing-here") == []


def test_a_stage_key_the_spark_engine_cannot_honour_is_refused_naming_it(pdir: PipelineDir) -> None:
    """max_rss is not silently ignored: exit 2 before Spark starts, naming the stage and the key."""
    pdir.write(BASE.replace("  - {name: l,", "  - {name: l, max_rss: 512MiB,"))
    r = pdir.etlstage("run", "--engine", "spark", "--once", "--no-progress")
    assert r.code == 2, r.stderr
    assert "stage 'l': max_rss: the Spark engine does not replace a worker" in r.stderr
    assert "Traceback" not in r.stderr
    assert not (pdir.path / "out.txt").exists()
    pdir.write(BASE.replace("  - {name: l,", "  - {name: l, max_rss: 512MiB,") + "engine: {kind: spark}\n")
    r = pdir.etlstage("validate")
    assert r.code == 2 and "stage 'l': max_rss" in r.stderr, r
    assert pdir.etlstage("run", "--engine", "supervisor", "--once", "--no-progress").code == 0


def test_the_keys_docs_mark_refused_are_the_ones_the_spark_engine_refuses() -> None:
    import re

    from etlstage.spark.driver.config import REFUSED_KEYS
    from tests.support.paths import ROOT

    doc = (ROOT / "docs" / "stages-yaml.md").read_text()
    refused = set(re.findall(r"^\| `([a-z_]+)` \| [^|]* \| [^|]*\*\*refused\*\*", doc, flags=re.M))
    assert refused == set(REFUSED_KEYS)


SHARDED = BASE.replace(
    "  - {name: e, type: E, command: [" + PY + ", " + TW + ', count, "3"]}',
    "  - {name: e, type: E, mode: cyclic, offsets: supervisor, offset_policy: {type: counter, step: 2}, instances: 2,"
    " command: [" + PY + ", " + TW + ', count, "3"]}',
)


def test_engine_spark_from_the_flag_is_checked_as_engine_spark_from_the_file(pdir: PipelineDir) -> None:
    """Sharded supervisor offsets need engine spark: the flag gives it as the file would.
    (max_rss stops the run before Spark starts: the one problem left to report.)"""
    pdir.write(SHARDED.replace("  - {name: l,", "  - {name: l, max_rss: 1GiB,"))
    r = pdir.etlstage("run", "--engine", "spark", "--once", "--no-progress")
    assert r.code == 2, r.stderr
    assert "supervisor-managed offsets" not in r.stderr
    assert "stage 'l': max_rss" in r.stderr and "Traceback" not in r.stderr
    pdir.write(SHARDED)
    for args in (["validate"], ["run", "--once", "--no-progress"], ["run", "--engine", "supervisor", "--once"]):
        r = pdir.etlstage(*args)
        assert r.code == 2, (args, r.stderr)
        assert "stage 'e': supervisor-managed offsets with instances > 1 need engine spark" in r.stderr
        assert "use instances: 1 or --engine spark" in r.stderr and "Traceback" not in r.stderr
