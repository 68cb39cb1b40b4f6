"""A broken or hostile state directory: refused with exit 2 and what to do, nothing written through a link."""

from __future__ import annotations

import os
import pwd
import random
import sqlite3
import stat
from pathlib import Path

import pytest

from etlstage.errors import StateError
from etlstage.state.store import StateStore, _first_problems, state_dir_problems

STAGES = """\
stages:
  - {name: src, type: E, command: ["{PY}", "{TW}", count, "20"]}
  - {name: sink, type: L, command: ["{PY}", "{TW}", append, out.txt]}
"""


def mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


@pytest.fixture
def ran(pdir):
    """A pipeline that ran once: state.db and stages/src, stages/sink exist."""
    pdir.write(STAGES)
    r = pdir.run("--once")
    assert r.code == 0, r.stderr
    assert len(pdir.lines("out.txt")) == 20
    return pdir


def test_a_first_run_creates_every_state_folder_owner_only(ran):
    assert mode(ran.path / ".etlstage") == 0o700
    state = ran.path / ".etlstage" / "stages"  # the pipeline's own folder (it is named after the file)
    assert mode(state) == 0o700
    assert mode(state / "stages") == 0o700
    assert mode(state / "stages" / "src") == 0o700
    assert mode(state / "state.db") == 0o600


def test_a_damaged_state_db_is_refused_by_status_and_run(ran):
    db = ran.path / ".etlstage" / "stages" / "state.db"
    data = bytearray(db.read_bytes())
    rng = random.Random(14)
    data[4096:] = bytes(rng.randrange(256) for _ in range(len(data) - 4096))  # header page intact, the rest garbage
    db.write_bytes(bytes(data))
    for r in (ran.etlstage("status", "stages.yaml"), ran.run("--once")):
        assert r.code == 2, r.stderr
        assert "Traceback" not in r.stderr, r.stderr
        assert f"the state store {db} is damaged" in r.stderr, r.stderr
        assert f"mv {db} {db}.damaged" in r.stderr, r.stderr
    assert len(ran.lines("out.txt")) == 20  # nothing extracted again


@pytest.mark.parametrize(
    ("damage", "says"),
    [
        ("DROP TABLE checkpoints", "it has no table checkpoints"),
        ("ALTER TABLE checkpoints DROP COLUMN committed_end", "its table checkpoints lacks committed_end"),
    ],
)
def test_a_state_db_missing_a_table_or_a_column_is_refused_not_recreated(ran, damage, says):
    """A table recreated empty would lose the offsets it held: the store is refused, naming
    what is missing, and nothing is extracted again."""
    db = ran.path / ".etlstage" / "stages" / "state.db"
    with sqlite3.connect(db) as conn:
        conn.execute(damage)
    conn.close()
    r = ran.run("--once")
    assert r.code == 2, r.stderr
    assert says in r.stderr and f"the state store {db} is damaged" in r.stderr, r.stderr
    assert len(ran.lines("out.txt")) == 20


def test_an_emptied_state_db_beside_stage_folders_is_refused(ran):
    db = ran.path / ".etlstage" / "stages" / "state.db"
    db.write_bytes(b"")
    r = ran.run("--once")
    assert r.code == 2, r.stderr
    assert f"{db} is empty (0 bytes)" in r.stderr and "(sink, src)" in r.stderr, r.stderr
    assert "delete the empty file" in r.stderr
    assert len(ran.lines("out.txt")) == 20  # nothing extracted again
    assert ran.etlstage("status", "stages.yaml").code == 2
    db.unlink()  # deleting it is how to start afresh on purpose
    assert ran.run("--once").code == 0
    assert len(ran.lines("out.txt")) == 40


def test_an_empty_state_db_without_stage_folders_is_a_fresh_start(pdir):
    pdir.write(STAGES)
    (pdir.path / ".etlstage").mkdir(mode=0o700)
    (pdir.path / ".etlstage" / "state.db").write_bytes(b"")
    r = pdir.run("--once")
    assert r.code == 0, r.stderr
    assert len(pdir.lines("out.txt")) == 20


def test_a_state_db_linked_elsewhere_is_refused_and_its_target_untouched(pdir, tmp_path_factory):
    target = tmp_path_factory.mktemp("elsewhere") / "victim"
    target.write_bytes(b"")
    target.chmod(0o644)
    pdir.write(STAGES)
    (pdir.path / ".etlstage").mkdir(mode=0o700)
    (pdir.path / ".etlstage" / "state.db").symlink_to(target)
    r = pdir.run("--once")
    assert r.code == 2, r.stderr
    assert f"state.db is a symbolic link (to {target})" in r.stderr, r.stderr
    assert target.read_bytes() == b"" and mode(target) == 0o644
    assert pdir.etlstage("status", "stages.yaml").code == 2


def test_the_store_itself_names_a_state_db_link_and_its_target(tmp_path, tmp_path_factory):
    """The link check before a run names a linked state.db first; the store, opened on its
    own (another process may put the link there after that check), names it as well, and
    leaves the target as it was."""
    target = tmp_path_factory.mktemp("elsewhere") / "victim"
    target.write_bytes(b"")
    target.chmod(0o644)
    state = tmp_path / ".etlstage"
    state.mkdir(mode=0o700)
    (state / "state.db").symlink_to(target)
    with pytest.raises(StateError, match=f"state.db is a symbolic link \\(to {target}\\)"):
        StateStore(state)
    assert target.read_bytes() == b"" and mode(target) == 0o644


@pytest.mark.parametrize("suffix", ["-wal", "-shm", "-journal"])
def test_a_file_sqlite_keeps_beside_the_db_linked_elsewhere_is_refused(ran, tmp_path_factory, suffix):
    target = tmp_path_factory.mktemp("elsewhere") / "victim"
    target.write_bytes(b"keep")
    side = ran.path / ".etlstage" / "stages" / f"state.db{suffix}"
    side.unlink(missing_ok=True)
    side.symlink_to(target)
    r = ran.run("--once")
    assert r.code == 2, r.stderr
    assert f"state.db{suffix} is a symbolic link (to {target})" in r.stderr, r.stderr
    assert target.read_bytes() == b"keep"


def test_a_stage_folder_linked_elsewhere_is_refused_and_its_target_not_chmoded(ran, tmp_path_factory):
    target = tmp_path_factory.mktemp("elsewhere")
    target.chmod(0o755)
    sink = ran.path / ".etlstage" / "stages" / "stages" / "sink"
    sink.rmdir()
    sink.symlink_to(target, target_is_directory=True)
    r = ran.run("--once")
    assert r.code == 2, r.stderr
    assert f"stages/sink is a symbolic link (to {target})" in r.stderr, r.stderr
    assert mode(target) == 0o755


def test_a_stages_folder_linked_elsewhere_is_refused(pdir, tmp_path_factory):
    target = tmp_path_factory.mktemp("elsewhere")
    target.chmod(0o755)
    pdir.write(STAGES)
    (pdir.path / ".etlstage").mkdir(mode=0o700)
    (pdir.path / ".etlstage" / "stages").symlink_to(target, target_is_directory=True)
    r = pdir.run("--once")
    assert r.code == 2, r.stderr
    assert "stages is a symbolic link" in r.stderr, r.stderr
    assert mode(target) == 0o755 and not list(target.iterdir())


def test_a_state_dir_that_is_a_link_is_refused_by_validate_and_run(pdir, tmp_path_factory):
    target = tmp_path_factory.mktemp("elsewhere")
    target.chmod(0o755)
    pdir.write(STAGES)
    (pdir.path / ".etlstage").symlink_to(target, target_is_directory=True)
    for r in (pdir.etlstage("validate", "stages.yaml"), pdir.run("--once")):
        assert r.code == 2, r.stderr
        assert f".etlstage is a symbolic link (to {target})" in r.stderr, r.stderr
    assert mode(target) == 0o755 and not list(target.iterdir())


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to give the folder to another user")
def test_a_state_dir_owned_by_another_user_is_refused(pdir):
    nobody = pwd.getpwnam("nobody").pw_uid
    pdir.write(STAGES)
    state = pdir.path / ".etlstage"
    state.mkdir()
    os.chown(state, nobody, -1)
    state.chmod(0o777)
    for r in (pdir.etlstage("validate", "stages.yaml"), pdir.run("--once"), pdir.etlstage("status", "stages.yaml")):
        assert r.code == 2, r.stderr
        assert f"{state} belongs to nobody (uid {nobody}), not to you" in r.stderr, r.stderr
    assert mode(state) == 0o777 and not list(state.iterdir())
    assert not (pdir.path / "out.txt").exists()


@pytest.mark.parametrize("before", [0o777, 0o720, 0o702, 0o755, 0o711])
def test_a_state_dir_others_could_reach_is_made_owner_only_with_a_warning_if_they_could_write(pdir, before):
    pdir.write(STAGES)
    state = pdir.path / ".etlstage"
    state.mkdir()
    state.chmod(before)
    r = pdir.run("--once")
    assert r.code == 0, r.stderr
    warned = f"{state} was writable by others (mode {before:03o}); made owner-only (0700)" in r.stderr
    assert warned == bool(before & 0o022), r.stderr  # group or others could write: said
    assert mode(state) == 0o700


OPEN_AT_ONCE = """
import sys, time
from etlstage.state.store import StateStore
start = float(sys.argv[2])
while time.time() < start:
    pass
store = StateStore(sys.argv[1])
store.add_deadletter("up", 1, "refused", b"m\\n", 1, 10)
store.close()
"""


@pytest.mark.parametrize("round_", range(3))
def test_processes_creating_the_store_at_once_all_open_it(tmp_path: Path, round_: int) -> None:
    """A Spark engine's tasks may each set a dead letter aside before any state.db exists,
    beside stage folders: none may take the file another is creating for an emptied one."""
    import subprocess
    import sys
    import time

    state = tmp_path / "state"
    (state / "stages" / "up").mkdir(parents=True)
    start = time.time() + 1.5
    procs = [
        subprocess.Popen([sys.executable, "-c", OPEN_AT_ONCE, str(state), str(start)], stderr=subprocess.PIPE)
        for _ in range(8)
    ]
    errors = [p.communicate(timeout=60)[1].decode() for p in procs]
    assert [p.returncode for p in procs] == [0] * 8, "\n".join(e for e in errors if e)
    from etlstage.state.store import StateStore

    store = StateStore(state)
    try:
        assert len(store.deadletters()) == 8
    finally:
        store.close()


def test_a_state_dir_several_levels_from_an_existing_folder_can_be_created(tmp_path: Path) -> None:
    """validate looks up to the nearest existing folder: there it may write, so no problem;
    beneath a file, it says so."""
    assert state_dir_problems(tmp_path / "a" / "b" / "c") == []
    (tmp_path / "file").write_text("x")
    assert state_dir_problems(tmp_path / "file" / "b" / "c") == [f"{tmp_path / 'file' / 'b' / 'c'}: Not a directory"]


def test_an_existing_folder_on_a_kernel_file_system_is_named_as_one(tmp_path: Path) -> None:
    """/proc/<this process> is a folder this user owns, but on a file system that holds no
    files: state_dir_problems names it, as it does a folder that would be created there."""
    ours = Path(f"/proc/{os.getpid()}")
    assert state_dir_problems(ours) == [f"{ours} is on a kernel file system (like /proc or /sys) that holds no files"]
    assert state_dir_problems(ours / "state") == [
        f"{ours / 'state'} cannot be created: {ours} is on a kernel file system (like /proc or /sys) that holds no files"
    ]
    assert state_dir_problems(tmp_path) == []


def test_a_state_directory_the_system_refuses_to_make_is_a_state_error_naming_it(tmp_path: Path) -> None:
    """Made past the start-up checks (a file put in the way since): the error names the
    directory and the system's reason, no traceback, and nothing is made."""
    from etlstage.state.store import ensure_private_dir

    (tmp_path / "in-the-way").write_text("a file where a folder should be")
    target = tmp_path / "in-the-way" / "state"
    with pytest.raises(StateError, match=r"cannot create the state directory .*in-the-way/state: Not a directory"):
        ensure_private_dir(target)
    assert (tmp_path / "in-the-way").read_text() == "a file where a folder should be"


def test_a_state_db_with_many_problems_is_refused_naming_the_first_three(tmp_path):
    """SQLite's check can find thousands of problems in a damaged file, and gives many of them in
    one row: the error names the first three and how many more, so it stays readable."""
    store = StateStore(tmp_path)
    store.close()
    with sqlite3.connect(store.path) as conn:  # pages enough to damage several
        conn.execute("CREATE TABLE filler (a INTEGER PRIMARY KEY, b TEXT)")
        conn.executemany("INSERT INTO filler (b) VALUES (?)", [(f"v{i:06d}" * 5,) for i in range(20000)])
    conn.close()
    data = bytearray(store.path.read_bytes())
    rng = random.Random(1)
    for page in range(10, 60, 5):
        for at in range(200, 4000, 97):
            data[page * 4096 + at] = rng.randrange(256)
    store.path.write_bytes(bytes(data))
    with sqlite3.connect(store.path) as conn:
        found = [
            line
            for (row,) in conn.execute("PRAGMA quick_check").fetchall()
            for line in str(row).splitlines()
            if not line.startswith("***")
        ]
    conn.close()
    assert len(found) > 4, found
    with pytest.raises(StateError) as refused:
        StateStore(tmp_path)
    detail = str(refused.value).split(" is damaged or is not etlstage's (", 1)[1].split("). Move it aside")[0]
    assert detail == "; ".join(found[:3]) + f"; and {len(found) - 3} more", detail


@pytest.mark.parametrize(
    ("check", "shown"),
    [
        ([("a",), ("b",), ("c",)], "a; b; c"),  # one problem per row, as older SQLite gives them
        ([("a",), ("b",), ("c",), ("d",)], "a; b; c; and 1 more"),
        ([("*** in database main ***\na\nb",), ("c",)], "a; b; c"),
    ],
)
def test_the_problems_named_for_a_damaged_state_db(check, shown):
    assert _first_problems(check) == shown


def open_descriptors_of(path: Path) -> list[str]:
    """This process's descriptors open on ``path`` (from /proc/self/fd)."""
    target = os.path.realpath(path)
    found = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{fd}") == target:
                found.append(fd)
        except OSError:
            pass  # the listing's own descriptor, gone by now
    return found


def test_closing_the_store_releases_every_descriptor_on_state_db(tmp_path: Path) -> None:
    """close() gives back the connection's descriptor and the one kept to watch the file, at
    once, not when the object is collected: a program that goes on (a service, the harness)
    running many pipelines does not run out of descriptors."""
    store = StateStore(tmp_path)
    assert len(open_descriptors_of(store.path)) >= 2  # the connection's and the watch
    store.close()
    assert open_descriptors_of(store.path) == [], "state.db still open after close() while the store is referenced"


OTHER = 12345  # a uid no one has: "another user"


def _shared(pdir, mode: int, owner: int) -> Path:
    shared = pdir.path / "shared"
    shared.mkdir()
    os.chown(shared, owner, -1)
    shared.chmod(mode)
    pdir.write(STAGES.replace("stages:", "state_dir: shared/etl\nstages:", 1))
    return shared


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to give the folder to another user")
@pytest.mark.parametrize(
    ("mode", "owner", "says"),
    [
        (0o777, OTHER, f"shared belongs to uid {OTHER}, who could rename or replace"),
        (0o755, OTHER, f"shared belongs to uid {OTHER}, who could rename or replace"),
        (0o770, 0, "shared is writable by its group or by others (mode 770)"),
        (0o757, 0, "shared is writable by its group or by others (mode 757)"),
    ],
)
def test_a_state_dir_under_a_folder_another_user_could_change_is_refused(pdir, mode, owner, says):
    shared = _shared(pdir, mode, owner)
    for r in (pdir.etlstage("validate", "stages.yaml"), pdir.run("--once")):
        assert r.code == 2, r.stderr
        assert f"state folder {shared}/etl: {shared.parent}/{says}" in r.stderr, r.stderr
        assert "Traceback" not in r.stderr
    assert not (shared / "etl").exists() and not (pdir.path / "out.txt").exists()


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to give the folder to another user")
def test_under_a_sticky_folder_like_tmp_only_a_state_dir_of_ours_is_used(pdir):
    shared = _shared(pdir, 0o1777, 0)  # root's, sticky, anyone may write: as /tmp
    r = pdir.run("--once")
    assert r.code == 0, r.stderr  # etl did not exist: made, ours
    assert (shared / "etl").stat().st_uid == os.geteuid()
    os.chown(shared / "etl", OTHER, -1)  # now as if another user had made it first
    r = pdir.run("--once")
    assert r.code == 2, r.stderr
    assert f"{shared}/etl belongs to uid {OTHER}, in {shared}, which anyone may write in" in r.stderr, r.stderr


def test_the_folders_above_are_checked_as_written_and_as_resolved(tmp_path: Path) -> None:
    from etlstage.state.store import ancestors_problem

    open_dir = tmp_path / "open"
    open_dir.mkdir()
    open_dir.chmod(0o777)
    (open_dir / "real").mkdir()
    (tmp_path / "link").symlink_to(open_dir / "real")
    problem = ancestors_problem(tmp_path / "link" / "etl")
    assert problem is not None and f"{open_dir} is writable by its group or by others" in problem, problem
    assert ancestors_problem(tmp_path / "fine" / "deeper" / "etl") is None  # missing levels: made ours


def test_a_state_store_that_cannot_be_opened_is_a_clear_error_naming_it(tmp_path: Path) -> None:
    """state.db that is a directory (or anything os.open refuses): a StateError naming the
    file and why, not a traceback."""
    (tmp_path / "state.db").mkdir()
    with pytest.raises(StateError, match=r"cannot open the state store .*state\.db: Is a directory"):
        StateStore(tmp_path)
