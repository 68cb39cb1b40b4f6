"""The state store: one SQLite file under ``state_dir`` (WAL, transactional).

It holds each E-stage's committed offsets (supervisor-managed) or progress
(worker-managed), the windows in flight, the dead-letter store and the running
supervisor's heartbeat, so ``etlstage status`` can read it while a pipeline runs.

Files and folders are created owner-only (0700 / 0600).  Where state is written, nothing
is taken on trust: the state directory, ``stages/``, each stage's directory, ``state.db``
and the files SQLite keeps beside it (``-wal``, ``-shm``, ``-journal``) must not be
symbolic links and must belong to the user running etlstage; a state directory others
could write is made owner-only (with a warning).  Once the directory is ours and 0700,
no one else can swap what is in it, so the checks made at opening hold for the run.
"""

from __future__ import annotations

import errno
import functools
import json
import logging
import os
import pwd
import sqlite3
import stat
import time
import weakref
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple, ParamSpec, TypeVar

from etlstage.errors import ConfigError, StateError
from etlstage.hint import command
from etlstage.protocol.framing import split_block
from etlstage.state.sqlite import apply_schema, connect, immediate

log = logging.getLogger("etlstage.state")
SIDE_FILES = ("-wal", "-shm", "-journal")  # what SQLite creates beside the database

SCHEMA = """
CREATE TABLE IF NOT EXISTS checkpoints (
    source TEXT PRIMARY KEY,          -- stage#instance of an E-stage
    committed_end TEXT,               -- JSON: the end of the last done window (supervisor offsets)
    window_seq INTEGER NOT NULL,      -- windows done so far
    messages INTEGER NOT NULL DEFAULT 0,
    updated_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS windows (
    source TEXT NOT NULL,
    seq INTEGER NOT NULL,
    request TEXT,
    opened_at REAL NOT NULL,
    closed_at REAL,
    messages INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (source, seq)
);
CREATE TABLE IF NOT EXISTS deadletters (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    stage TEXT NOT NULL,
    created_at REAL NOT NULL,
    attempts INTEGER NOT NULL,
    error TEXT NOT NULL,
    messages INTEGER NOT NULL,
    inputs BLOB NOT NULL,             -- the messages, each followed by the stage's EOM
    eom INTEGER NOT NULL,
    status TEXT NOT NULL DEFAULT 'new' -- new | replay | replayed
);
CREATE TABLE IF NOT EXISTS runs (
    pid INTEGER NOT NULL,
    started_at REAL NOT NULL,
    heartbeat REAL NOT NULL,
    info TEXT
);
"""


P = ParamSpec("P")
R = TypeVar("R")


def _damaged(path: Path, detail: object) -> StateError:
    return StateError(
        f"the state store {path} is damaged or is not etlstage's ({detail}). Move it aside "
        f"(mv {path} {path}.damaged) and put back a copy from a backup; or run without it to "
        "start afresh: its committed offsets and dead letters are then lost and extractors start again "
        "from their beginning"
    )


SHOWN_PROBLEMS = 3  # a damaged file can have thousands; the first few say enough


def _first_problems(check: list[tuple[object, ...]]) -> str:
    """``PRAGMA quick_check``'s findings, a few of them: SQLite gives one per row or many in one
    row (one per line, after a "*** in database main ***" heading)."""
    problems = [
        line for row in check for line in str(row[0]).splitlines() if line and not line.startswith("*** in database")
    ]
    shown = "; ".join(problems[:SHOWN_PROBLEMS])
    more = len(problems) - SHOWN_PROBLEMS
    return f"{shown}; and {more} more" if more > 0 else shown


def _guarded(method: Callable[P, R]) -> Callable[P, R]:
    """``method`` of :class:`StateStore`, with SQLite's errors as a :class:`StateError` that names
    the file (a table dropped or the file damaged while a run or ``status`` uses it)."""

    @functools.wraps(method)
    def call(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return method(*args, **kwargs)
        except sqlite3.OperationalError as exc:
            store = args[0]
            assert isinstance(store, StateStore)
            if "locked" in str(exc) or "busy" in str(exc):
                raise StateError(f"cannot use the state store {store.path}: {exc}") from None
            raise _damaged(store.path, exc) from None
        except sqlite3.DatabaseError as exc:
            store = args[0]
            assert isinstance(store, StateStore)
            raise _damaged(store.path, exc) from None

    return call


def _expected_columns() -> dict[str, set[str]]:
    """Each table of :data:`SCHEMA` and its columns, read from SQLite itself."""
    db = sqlite3.connect(":memory:")
    try:
        db.executescript(SCHEMA)
        return _columns(db)
    finally:
        db.close()


def _columns(db: sqlite3.Connection) -> dict[str, set[str]]:
    tables = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")]
    return {t: {r[1] for r in db.execute("SELECT * FROM pragma_table_info(?)", (t,))} for t in tables}


@dataclass(frozen=True)
class DeadLetter:
    id: int
    stage: str
    created_at: float
    attempts: int
    error: str
    messages: int
    inputs: bytes
    eom: int
    status: str

    def split(self) -> list[bytes]:
        return split_block(self.inputs, bytes([self.eom]))


class Checkpoint(NamedTuple):
    source: str  # "stage" or "stage#instance" of an E-stage
    committed_end: object  # supervisor-managed offsets: the last committed end
    windows_done: int
    messages: int
    updated_at: float


class OpenWindow(NamedTuple):
    source: str
    seq: int
    request: object
    opened_at: float


class Run(NamedTuple):
    pid: int
    started_at: float
    heartbeat: float
    info: dict[str, object]  # the pipeline's last progress document


def _user(uid: int) -> str:
    try:
        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except KeyError:
        return f"uid {uid}"


def _on_pseudo_fs(path: Path) -> bool:
    """On /proc, /sys and the like: no blocks and no inodes to hold a file."""
    try:
        fs = os.statvfs(path)
    except OSError:
        return False
    return fs.f_blocks == 0 and fs.f_files == 0


def _entry_problem(path: Path, st: os.stat_result, kind: str) -> str | None:
    """Why an existing entry where state is written cannot be used, or None."""
    if stat.S_ISLNK(st.st_mode):
        return (
            f"{path} is a symbolic link (to {os.readlink(path)}); etlstage does not follow links where it writes "
            f"state: put the real {kind} there, or point state_dir at the real directory"
        )
    wanted = stat.S_ISDIR if kind == "directory" else stat.S_ISREG
    if not wanted(st.st_mode):
        return f"{path} exists and is not a {kind}"
    if st.st_uid != os.geteuid():
        return (
            f"{path} belongs to {_user(st.st_uid)}, not to you ({_user(os.geteuid())}): another user could read "
            f"or change the pipeline's state; chown it to you, or choose another state_dir"
        )
    return None


def _others_could_swap(child: Path, parent: Path) -> str | None:
    """Why another user could rename or replace ``child`` (existing or not) in ``parent``, or None."""
    me = os.geteuid()
    st = os.stat(parent)
    if st.st_uid not in (me, 0):
        return f"{parent} belongs to {_user(st.st_uid)}, who could rename or replace {child} in it"
    if not st.st_mode & 0o022:
        return None
    if not st.st_mode & stat.S_ISVTX:
        return (
            f"{parent} is writable by its group or by others (mode {stat.S_IMODE(st.st_mode):o}): any of them "
            f"could rename or replace {child} in it"
        )
    try:  # sticky (like /tmp): only the owner of an entry may rename it
        owner = os.lstat(child).st_uid
    except FileNotFoundError:
        return None  # etlstage creates it, as yours
    if owner not in (me, 0):
        return f"{child} belongs to {_user(owner)}, in {parent}, which anyone may write in"
    return None


STATE_HINT = "keep the state in a folder only you (or root) can change, all the way up (e.g. under your home)"


def ancestors_problem(path: str | Path, what: str = "state folder", hint: str = STATE_HINT) -> str | None:
    """Why another user could swap the folder ``path`` (or a folder above it) for one of theirs
    while a run writes in it, as ssh's StrictModes asks of a key's folders: each folder above
    it (the path as written and as resolved) must be yours or root's, and writable by no one
    else, unless it is sticky (like /tmp) and the entry below it is yours or root's."""
    p = Path(os.path.abspath(path))
    chains = [p]
    existing = p
    while not os.path.lexists(existing) and existing != existing.parent:
        existing = existing.parent
    real = Path(os.path.realpath(existing)).joinpath(*p.parts[len(existing.parts) :])
    if real != p:
        chains.append(real)
    me = os.geteuid()
    try:
        for chain in chains:
            for child in [chain, *chain.parents][:-1]:
                if not os.path.lexists(child.parent):
                    continue  # made by etlstage, as yours
                problem = _others_could_swap(child, child.parent)
                if problem is None and child.is_symlink() and os.lstat(child).st_uid not in (me, 0):
                    problem = f"{child} is a link of {_user(os.lstat(child).st_uid)}, who could point it elsewhere"
                if problem:
                    return f"{what} {p}: {problem}; {hint}"
    except OSError as exc:
        return f"{what} {p}: cannot check the folders above it: {exc.strerror}"
    return None


def state_dir_problems(path: str | Path, above: bool = True) -> list[str]:
    """What would keep :func:`ensure_private_dir` from using ``path``, found without changing
    anything; with ``above``, the folders above it too (:func:`ancestors_problem`)."""
    p = Path(path)
    if "\x00" in str(p):
        return [f"{str(p)!r} holds a NUL byte; no directory name can"]
    swap = ancestors_problem(p) if above else None
    if swap:
        return [swap]
    try:
        problem = _entry_problem(p, os.lstat(p), "directory")
        if problem is None and _on_pseudo_fs(p):
            problem = f"{p} is on a kernel file system (like /proc or /sys) that holds no files"
        return [problem] if problem else []
    except FileNotFoundError:
        pass
    except OSError as exc:
        return [f"{p}: {exc.strerror}"]
    parent = p.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir():
        return [f"{p} cannot be created: {parent} is not a directory"]
    if _on_pseudo_fs(parent):
        return [f"{p} cannot be created: {parent} is on a kernel file system (like /proc or /sys) that holds no files"]
    if not os.access(parent, os.W_OK | os.X_OK):
        return [f"{p} cannot be created: you may not write in {parent}"]
    return []


def ensure_private_dir(path: str | Path) -> Path:
    """The directory ``path``, created owner-only (every missing level 0700) and checked (module docstring)."""
    p = Path(path)
    if "\x00" in str(p):
        raise StateError(f"{str(p)!r} holds a NUL byte; no directory name can")
    missing = []
    level = p
    while not os.path.lexists(level) and level != level.parent:
        missing.append(level)
        level = level.parent
    try:
        for d in reversed(missing):
            try:
                os.mkdir(d, 0o700)
            except FileExistsError:
                pass
        st = os.lstat(p)
    except OSError as exc:
        raise StateError(f"cannot create the state directory {p}: {exc.strerror}") from None
    problem = _entry_problem(p, st, "directory")
    if problem:
        raise StateError(problem)
    if stat.S_IMODE(st.st_mode) != 0o700:
        if st.st_mode & 0o022:
            log.warning("%s was writable by others (mode %03o); made owner-only (0700)", p, stat.S_IMODE(st.st_mode))
        try:
            os.chmod(p, 0o700)
        except OSError as exc:
            raise StateError(f"cannot make {p} owner-only: {exc.strerror}") from None
    return p


@contextmanager
def _locked(directory: Path) -> Iterator[None]:
    """An exclusive lock on ``directory`` (flock on its descriptor) for the block."""
    import fcntl  # here: reading a pipeline file (config) imports this module, and needs no fcntl

    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


class StateStore:
    FILE = "state.db"

    def __init__(self, state_dir: str | Path, pipeline_file: str = "stages.yaml") -> None:
        """``pipeline_file``: the pipeline's file as the user named it, for the commands log lines suggest."""
        self.pipeline_file = pipeline_file
        self.dir = ensure_private_dir(state_dir)
        self.path = self.dir / self.FILE
        stage_dirs = self._stage_dirs()
        for suffix in SIDE_FILES:
            self._check_file(Path(str(self.path) + suffix))
        try:
            # Processes opening a new store at once (a Spark engine's tasks setting aside dead
            # letters) take turns: none sees the file another is creating still empty.
            with _locked(self.dir):
                self._open_file(stage_dirs)
                self.db = connect(self.path)
                self._check_schema()
                apply_schema(self.db, SCHEMA)
            # see check_intact; closed with the store, or when it is collected unclosed
            self._watch = os.open(self.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
            self._unwatch = weakref.finalize(self, os.close, self._watch)
            opened = os.fstat(self._watch)
            self._identity = (opened.st_dev, opened.st_ino)
        except sqlite3.OperationalError as exc:  # locked, unreadable...: the file may well be fine
            raise StateError(f"cannot use the state store {self.path}: {exc}") from None
        except sqlite3.DatabaseError as exc:
            raise _damaged(self.path, exc) from None
        for suffix in SIDE_FILES:
            side = Path(str(self.path) + suffix)
            if side.exists():
                os.chmod(side, 0o600)

    def _check_schema(self) -> None:
        """A new file gets the schema; one that has tables must have all of etlstage's, with their
        columns (all were created together): a table missing would be recreated empty, losing
        the offsets it held."""
        check = self.db.execute("PRAGMA quick_check").fetchall()
        if check != [("ok",)]:
            raise sqlite3.DatabaseError(_first_problems(check))
        found = _columns(self.db)
        if not found:
            return
        for table, columns in _expected_columns().items():
            if table not in found:
                raise sqlite3.DatabaseError(f"it has no table {table}")
            if not columns <= found[table]:
                raise sqlite3.DatabaseError(f"its table {table} lacks {', '.join(sorted(columns - found[table]))}")

    def _stage_dirs(self) -> list[str]:
        """Names of the stage directories under ``stages/`` (created 0700 if missing); no links among them."""
        stages = ensure_private_dir(self.dir / "stages")
        names = []
        with os.scandir(stages) as entries:
            for entry in entries:
                problem = _entry_problem(Path(entry.path), entry.stat(follow_symlinks=False), "directory")
                if problem:
                    raise StateError(problem)
                names.append(entry.name)
        return sorted(names)

    def _check_file(self, path: Path) -> None:
        try:
            problem = _entry_problem(path, os.lstat(path), "file")
        except FileNotFoundError:
            return
        if problem:
            raise StateError(problem)

    def _open_file(self, stage_dirs: list[str]) -> None:
        """Create or check ``state.db`` without following a link; refuse an emptied one that held state."""
        existed = os.path.lexists(self.path)
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                self._check_file(self.path)  # names the link and its target
            raise StateError(f"cannot open the state store {self.path}: {exc.strerror}") from None
        try:
            st = os.fstat(fd)
            problem = _entry_problem(self.path, st, "file")
            if problem:
                raise StateError(problem)
            if existed and st.st_size == 0 and stage_dirs:
                raise StateError(
                    f"{self.path} is empty (0 bytes), but {self.dir / 'stages'} holds the directories of stages "
                    f"that ran before ({', '.join(stage_dirs)}): the committed offsets and dead letters it held "
                    "are gone, and running on would start every extractor again from its beginning. Put back "
                    f"{self.FILE} from a backup; or, to start afresh on purpose, delete the empty file and run again"
                )
            if stat.S_IMODE(st.st_mode) != 0o600:
                os.fchmod(fd, 0o600)
        finally:
            os.close(fd)

    def close(self) -> None:
        self.db.close()
        self._unwatch()

    def check_intact(self) -> None:
        """Raise if ``state.db`` was replaced, removed or truncated since it was opened: what is
        committed from then on would not be where the next run looks for it.  Opens nothing
        (a descriptor kept from the opening), so a process out of descriptors is not told so."""
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            raise StateError(
                f"the state store {self.path} is gone since this run opened it: what was committed since "
                "is lost; put it back from a backup before the next run"
            ) from None
        except OSError:
            return  # not knowable now; the next heartbeat looks again
        if (st.st_dev, st.st_ino) != self._identity:
            raise StateError(
                f"the state store {self.path} was replaced by another file during the run: what this run "
                "committed is not in it; put the right file back from a backup before the next run"
            )
        if os.pread(self._watch, 16, 0) != b"SQLite format 3\x00":
            raise StateError(
                f"the state store {self.path} was truncated or overwritten during the run ({st.st_size} bytes, "
                f"no SQLite header): what this run committed is not safe in it; move it aside "
                f"(mv {self.path} {self.path}.damaged) and put back a copy from a backup"
            )

    def tx(self) -> AbstractContextManager[sqlite3.Connection]:
        return immediate(self.db)

    # --- checkpoints and windows ------------------------------------------------------

    def committed(self, source: str) -> tuple[object, int]:
        """(committed end or None, windows done) of an E-stage instance."""
        row = self.db.execute("SELECT committed_end, window_seq FROM checkpoints WHERE source=?", (source,)).fetchone()
        if row is None:
            return None, 0
        return (json.loads(row[0]) if row[0] is not None else None), row[1]

    def open_window(self, source: str, seq: int, request: object) -> None:
        with self.tx() as db:
            db.execute(
                "INSERT OR REPLACE INTO windows(source, seq, request, opened_at) VALUES (?,?,?,?)",
                (source, seq, None if request is None else json.dumps(request), time.time()),
            )

    def commit(self, source: str, seq: int, end: object, messages: int) -> None:
        """Window ``seq`` of ``source`` and all before it are done: record it atomically."""
        with self.tx() as db:
            db.execute(
                "INSERT INTO checkpoints(source, committed_end, window_seq, messages, updated_at) VALUES (?,?,?,?,?) "
                "ON CONFLICT(source) DO UPDATE SET committed_end=excluded.committed_end, "
                "window_seq=excluded.window_seq, messages=checkpoints.messages+excluded.messages, "
                "updated_at=excluded.updated_at",
                (source, None if end is None else json.dumps(end), seq + 1, messages, time.time()),
            )
            db.execute("DELETE FROM windows WHERE source=? AND seq<=?", (source, seq))

    def forget_open_windows(self) -> int:
        """At start-up: windows left open by an earlier run will be extracted again."""
        with self.tx() as db:
            return db.execute("DELETE FROM windows").rowcount

    def checkpoints(self) -> list[Checkpoint]:
        rows = self.db.execute(
            "SELECT source, committed_end, window_seq, messages, updated_at FROM checkpoints ORDER BY source"
        ).fetchall()
        return [Checkpoint(r[0], json.loads(r[1]) if r[1] else None, r[2], r[3], r[4]) for r in rows]

    def open_windows(self) -> list[OpenWindow]:
        """Windows opened and not yet committed (what a dead supervisor left is replayed)."""
        rows = self.db.execute("SELECT source, seq, request, opened_at FROM windows ORDER BY source, seq").fetchall()
        return [OpenWindow(r[0], r[1], json.loads(r[2]) if r[2] else None, r[3]) for r in rows]

    # --- dead letters -------------------------------------------------------------------

    def add_deadletter(self, stage: str, attempts: int, error: str, inputs: bytes, messages: int, eom: int) -> int:
        with self.tx() as db:
            cur = db.execute(
                "INSERT INTO deadletters(stage, created_at, attempts, error, messages, inputs, eom) "
                "VALUES (?,?,?,?,?,?,?)",
                (stage, time.time(), attempts, error, messages, inputs, eom),
            )
            return int(cur.lastrowid or 0)

    def set_aside(self, stage: str, attempts: int, error: str, inputs: bytes, messages: int, eom: int) -> int:
        """:meth:`add_deadletter`, and the log line that tells the operator where it went."""
        ident = self.add_deadletter(stage, attempts, error, inputs, messages, eom)
        log.error(
            "stage %r: %d message(s) failed %d times; written to the dead-letter store as #%d (%s)",
            stage,
            messages,
            attempts,
            ident,
            command("deadletter", "show", self.pipeline_file, str(ident)),
        )
        return ident

    def deadletters(self, status: str | None = None, stage: str | None = None) -> list[DeadLetter]:
        sql = "SELECT id, stage, created_at, attempts, error, messages, inputs, eom, status FROM deadletters"
        where, args = [], []
        if status:
            where.append("status=?")
            args.append(status)
        if stage:
            where.append("stage=?")
            args.append(stage)
        if where:
            sql += " WHERE " + " AND ".join(where)
        return [DeadLetter(*r) for r in self.db.execute(sql + " ORDER BY id", args).fetchall()]

    def deadletter_counts(self) -> dict[str, int]:
        """Dead letters by status (new, replay, replayed), without reading their messages."""
        return dict(self.db.execute("SELECT status, COUNT(*) FROM deadletters GROUP BY status").fetchall())

    def deadletter_stage_counts(self) -> dict[str, int]:
        """Dead letters by stage (all statuses), without reading their messages."""
        return dict(self.db.execute("SELECT stage, COUNT(*) FROM deadletters GROUP BY stage").fetchall())

    def deadletter(self, ident: int) -> DeadLetter | None:
        found = [d for d in self.deadletters() if d.id == ident]
        return found[0] if found else None

    def set_deadletter_status(self, ids: list[int], status: str) -> int:
        with self.tx() as db:
            return sum(db.execute("UPDATE deadletters SET status=? WHERE id=?", (status, i)).rowcount for i in ids)

    # --- the running supervisor -----------------------------------------------------------

    def heartbeat(self, info: dict[str, object]) -> None:
        self.check_intact()
        with self.tx() as db:
            pid = os.getpid()
            cur = db.execute("UPDATE runs SET heartbeat=?, info=? WHERE pid=?", (time.time(), json.dumps(info), pid))
            if cur.rowcount == 0:
                db.execute(
                    "INSERT INTO runs(pid, started_at, heartbeat, info) VALUES (?,?,?,?)",
                    (pid, time.time(), time.time(), json.dumps(info)),
                )

    def end_run(self) -> None:
        """This run is over; so is any run that started before it (one that died unannounced)."""
        self.check_intact()
        with self.tx() as db:
            pid = os.getpid()
            db.execute(
                "DELETE FROM runs WHERE pid=? OR started_at < (SELECT started_at FROM runs WHERE pid=?)", (pid, pid)
            )

    def runs(self) -> list[Run]:
        rows = self.db.execute("SELECT pid, started_at, heartbeat, info FROM runs").fetchall()
        return [Run(r[0], r[1], r[2], json.loads(r[3] or "{}")) for r in rows]


def existing_store(state_dir: str | Path) -> StateStore:
    """The store of a pipeline that ran (for the commands that read it); a ConfigError if it never ran."""
    if not (Path(state_dir) / StateStore.FILE).exists():
        raise ConfigError([f"no state yet: {state_dir} has no {StateStore.FILE} (the pipeline never ran)"])
    return StateStore(state_dir)


# Every query of the store reports a damaged or foreign file as a StateError (exit 2).
for _name in [n for n, v in vars(StateStore).items() if callable(v) and not n.startswith("_") and n != "tx"]:
    setattr(StateStore, _name, _guarded(getattr(StateStore, _name)))
