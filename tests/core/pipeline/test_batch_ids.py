"""Every L batch's id (``batch_id: true``): the same when the same batch is sent again, so a
loader that commits it with the data loads each batch once; never the same for other
messages, so such a loader never skips data it does not have."""

from __future__ import annotations

import shutil
from collections import Counter

import pytest

from etlstage.conversation.batchid import batch_id
from tests.support.engines import Engine

pytestmark = pytest.mark.timeout(120)


def ledger_stages(extract: str, crash_flag: str = "", extra: str = "") -> str:
    flag = f", {crash_flag}" if crash_flag else ""
    return f"""
        stages:
          - {{name: src, type: E, {extract}}}
          - {{name: sink, type: L, mode: batch, batch_size: 5, batch_id: true, {extra}
              restart: {{max_restarts: 2, backoff: 0.05}}, command: ["{{PY}}", "{{TW}}", ledger, out{flag}]}}
    """


def ids_log(pdir) -> list[tuple[str, int, str, str]]:
    """(id, messages, digest of the batch's lines, loaded or skipped), as the loader saw them."""
    return [(i, int(n), d, what) for i, n, d, what in (line.split() for line in pdir.lines("out/ids.log"))]


def test_a_batch_committed_by_a_loader_that_died_before_acknowledging_is_not_loaded_again(pdir):
    pdir.write(ledger_stages('command: ["{PY}", "{TW}", count, "40"]', crash_flag="crashed"))
    r = pdir.run("--once")
    assert r.code == 0, r.stderr
    assert (pdir.path / "crashed").exists(), "the loader died after a commit"
    got = Counter(int(x) for x in _committed(pdir))
    assert sorted(got) == list(range(40)) and set(got.values()) == {1}, got
    log = ids_log(pdir)
    skipped = [(i, d) for i, _, d, what in log if what == "skipped"]
    assert len(skipped) == 1, log  # the batch sent again came with its id, and was skipped
    assert [(i, d) for i, _, d, what in log if what == "loaded"].count(skipped[0]) == 1, log
    assert len({i for i, *_ in log}) == 8  # 40 messages, batches of 5: eight ids


@pytest.mark.timeout(300)
def test_on_either_engine_a_batch_sent_again_after_its_commit_keeps_its_id(engine: Engine) -> None:
    """The same loader crash on both engines: the batch goes to the restarted loader with
    the id it had, and is skipped; every row is loaded once."""
    from etlstage.worker.idempotent import FileSink

    (engine.tmp / "in.txt").write_text("".join(f"r{i}\n" for i in range(40)))
    code, log = engine.run(ledger_stages("command: [cat, in.txt]", crash_flag="crashed"))
    assert code == 0, log[-3000:]
    assert (engine.tmp / "crashed").exists()
    got = Counter(m.decode() for m in FileSink(engine.tmp / "out").lines())
    assert sorted(got) == sorted(f"r{i}" for i in range(40)) and set(got.values()) == {1}, got
    lines = [line.split() for line in (engine.tmp / "out" / "ids.log").read_text().splitlines()]
    skipped = [(i, d) for i, _, d, what in lines if what == "skipped"]
    assert len(skipped) == 1 and [(i, d) for i, _, d, w in lines if w == "loaded"].count(skipped[0]) == 1, lines


def _committed(pdir) -> list[bytes]:
    from etlstage.worker.idempotent import FileSink

    return FileSink(pdir.path / "out").lines()


def test_other_messages_at_the_same_place_get_another_id_so_nothing_is_skipped(pdir):
    """The state is reset and the source holds other rows: the batches sit at the same places
    in the same windows as the first run's. An id of the place alone would be the same, and
    the loader would skip the new rows; the content in it keeps them."""
    (pdir.path / "in.txt").write_text("".join(f"a{i}\n" for i in range(20)))
    stages = ledger_stages("command: [cat, in.txt]")
    pdir.write(stages)
    assert pdir.run("--once").code == 0
    shutil.rmtree(pdir.path / ".etlstage")  # a fresh state: window numbers start again
    (pdir.path / "in.txt").write_text("".join(f"b{i}\n" for i in range(20)))
    r = pdir.run("--once")
    assert r.code == 0, r.stderr
    got = sorted(m.decode() for m in _committed(pdir))
    assert got == sorted([f"a{i}" for i in range(20)] + [f"b{i}" for i in range(20)])
    assert all(what == "loaded" for *_, what in ids_log(pdir))


def test_window_sizes_changed_between_runs_never_skip_a_batch_the_loader_lacks(pdir):
    """Run 1 cuts windows of 10, run 2 (state reset) windows of 7, into the same sink: the
    batch at each place of run 2 holds the rows of run 1's there, or others. The loader
    skips a batch only when what it committed under that id is that batch, byte for byte."""
    pdir.write(ledger_stages('mode: cyclic, command: ["{PY}", "{TW}", count, "20", "10"]'))
    assert pdir.run("--once").code == 0
    shutil.rmtree(pdir.path / ".etlstage")  # a fresh state: window numbers start again
    pdir.write(ledger_stages('mode: cyclic, command: ["{PY}", "{TW}", count, "20", "7"]'))
    r = pdir.run("--once")
    assert r.code == 0, r.stderr
    log = ids_log(pdir)
    committed = {i: d for i, _, d, what in log if what == "loaded"}
    skipped = [(i, d) for i, _, d, what in log if what == "skipped"]
    assert skipped, "the first batch (rows 0-4 at the same place in both runs) is skipped"
    assert all(committed[i] == d for i, d in skipped), "a batch was skipped for an id committed with other rows"
    assert len(log) == 4 + 6  # run 1: 2 windows of 2 batches; run 2: windows of 7, 7, 6 rows, 2 batches each


def test_a_stage_without_batch_ids_sees_no_header(pdir):
    """Opt-in: without the key the batches are as before (the append loader writes them as is)."""
    pdir.write("""
        stages:
          - {name: src, type: E, command: ["{PY}", "{TW}", count, "12"]}
          - {name: sink, type: L, mode: batch, batch_size: 5, command: ["{PY}", "{TW}", append, out.txt]}
    """)
    assert pdir.run("--once").code == 0
    assert pdir.lines("out.txt") == [str(i) for i in range(12)]


@pytest.mark.parametrize(
    "stage, expected",
    [
        ("{name: sink, type: L, batch_id: true, command: [x]}", "batch ids are for L-stages in batch mode"),
        (
            "{name: sink, type: L, mode: batch, batch_driver: worker, batch_id: true, command: [x]}",
            "batch_driver worker",
        ),
        ("{name: sink, type: L, mode: batch, batch_id: true, markers: {eom: 0x61}, command: [x]}", "0x61"),
        ("{name: sink, type: L, mode: batch, batch_id: 1, command: [x]}", "batch_id"),
    ],
)
def test_batch_id_where_it_cannot_work_is_refused_naming_the_stage(pdir, stage, expected):
    pdir.write(f"""
        stages:
          - {{name: src, type: E, command: [cat, in.txt]}}
          - {stage}
    """)
    r = pdir.run("--once")
    assert r.code == 2 and expected in r.stderr and "stages[1]" in r.stderr.replace(" ", ""), r.stderr
    assert "Traceback" not in r.stderr


def test_the_id_covers_the_content_and_the_place() -> None:
    base = batch_id("p", "sink", 0, [("src", 3, 10)], b"m1\n", b"m2\n")
    assert base == batch_id("p", "sink", 0, [("src", 3, 10)], b"m1\nm2\n")  # however the pieces split
    for other in (
        batch_id("p", "sink", 0, [("src", 3, 10)], b"m1\nm3\n"),
        batch_id("p", "sink", 0, [("src", 3, 11)], b"m1\nm2\n"),
        batch_id("p", "sink", 0, [("src", 4, 10)], b"m1\nm2\n"),
        batch_id("p", "sink", 1, [("src", 3, 10)], b"m1\nm2\n"),
        batch_id("q", "sink", 0, [("src", 3, 10)], b"m1\nm2\n"),
    ):
        assert other != base


def test_the_example_idempotent_loader_loads_each_batch_once_across_a_rerun_of_the_same_window(pdir):
    """workers/examples/batches.py: a window extracted again after the supervisor died
    (here: its checkpoint not recorded, so the next run extracts it again with the same
    number) re-forms the same batches, and the loader skips every one of them."""
    import sqlite3

    from tests.support.paths import ROOT

    pdir.write(f"""
        stages:
          - {{name: src, type: E, mode: cyclic, command: ["{{PY}}", "{{TW}}", count, "20", "10"]}}
          - {{name: sink, type: L, mode: batch, batch_size: 4, batch_id: true,
              command: ["{{PY}}", "{ROOT / "workers" / "examples" / "batches.py"}", out]}}
    """)
    assert pdir.run("--once").code == 0
    files = sorted(p.name for p in (pdir.path / "out").iterdir())
    # forget the last window's commit, as if the supervisor had died before recording it
    db = sqlite3.connect(next((pdir.path / ".etlstage").rglob("state.db")))
    db.execute("UPDATE checkpoints SET window_seq = 1, messages = 10")
    db.commit()
    db.close()
    for offset in (pdir.path / ".etlstage").rglob("offset-0"):  # the extractor's own offset: back to 10
        offset.write_text("10")
    r = pdir.run("--once")
    assert r.code == 0, r.stderr
    assert "extracted 10 messages" in r.stderr, r.stderr  # the window went through the loader again
    assert sorted(p.name for p in (pdir.path / "out").iterdir()) == files  # no new file: every batch skipped
    from etlstage.worker.idempotent import FileSink

    assert sorted(int(m) for m in FileSink(pdir.path / "out").lines()) == list(range(20))
