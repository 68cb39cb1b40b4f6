"""The example workers of workers/examples/, each run as a real subprocess.

Every worker x every mode it supports x default and printable markers: the replies must
match byte for byte (BNC placement, partial batches closed by EOB, empty messages), and
the worker must exit 0 with nothing more on stdout once stdin closes.  The conversations
are plain tables (see tests/wire.py for the notation).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from etlstage.protocol import Markers, Scenario
from tests.support.paths import ROOT
from tests.support.wire import (
    DEFAULT,
    PRINTABLE,
    PRINTABLE_NL,
    Finished,
    Step,
    WireWorker,
    converse,
    loader_expectation,
    render,
)

EXAMPLES = ROOT / "workers" / "examples"
PY = sys.executable

pytestmark = pytest.mark.timeout(60)

# --- the tables: mode -> (scenario settings, conversation) ------------------------------

BIG = [f"message {i:05d} " + "x" * 90 for i in range(3000)]  # ~300 KB: many read chunks

T_TABLES: dict[str, tuple[dict[str, object], list[Step]]] = {
    "single": (
        {"mode": "single"},
        [
            ("hello{M}", "HELLO{M}{P}"),
            ("{M}", "{M}{P}"),  # empty message -> one empty result
            ("caf\xc3\xa9 1-2 Zz{M}", "CAF\xc3\xa9 1-2 ZZ{M}{P}"),  # bytes >= 0x80 unchanged
            ("hel", ""),  # a message cut across two writes
            ("lo{M}", "HELLO{M}{P}"),
            ("a{M}b{M}", "A{M}{P}B{M}{P}"),  # two requests arriving in one chunk
            (
                "".join(f"m{i}{{M}}" for i in range(500)),
                "".join(f"M{i}{{M}}{{P}}" for i in range(500)),
            ),  # written ahead
        ],
    ),
    "batch-supervisor": (
        {"mode": "batch", "batch_size": 3, "batch_driver": "supervisor"},
        [
            ("a{M}b{M}c{M}{B}", "A{M}B{M}C{M}{P}"),
            ("d{M}{B}", "D{M}{P}"),  # partial batch closed by EOB
            ("a{M}{B}b{M}c{M}{B}", "A{M}{P}B{M}C{M}{P}"),  # the next batch written ahead
            ("{M}e{M}{M}{B}", "{M}E{M}{M}{P}"),  # empty messages inside a batch
            ("f{M}g", ""),
            ("{M}{B}", "F{M}G{M}{P}"),
            ("".join(m + "{M}" for m in BIG[:3]) + "{B}", "".join(m.upper() + "{M}" for m in BIG[:3]) + "{P}"),
        ],
    ),
    "batch-supervisor-big": (
        {"mode": "batch", "batch_size": len(BIG), "batch_driver": "supervisor"},
        [("".join(m + "{M}" for m in BIG) + "{B}", "".join(m.upper() + "{M}" for m in BIG) + "{P}")],
    ),
    "batch-worker": (
        {"mode": "batch", "batch_size": 3, "batch_driver": "worker"},
        [
            ("a{M}", "{N}"),
            ("b{M}", "{N}"),
            ("c{M}", "A{M}B{M}C{M}{P}"),  # the filling message gets no BNC
            ("d{M}", "{N}"),
            ("{B}", "D{M}{P}"),  # partial batch: EOB in answer to BNC
            ("{M}", "{N}"),  # empty message
            ("x", ""),
            ("{M}", "{N}"),
            ("{M}", "{M}X{M}{M}{P}"),
            ("p{M}", "{N}"),
            ("q{M}", "{N}"),
            ("{B}", "P{M}Q{M}{P}"),
        ],
    ),
    "batch-worker-size1": (
        {"mode": "batch", "batch_size": 1, "batch_driver": "worker"},
        [("a{M}", "A{M}{P}"), ("{M}", "{M}{P}"), ("b{M}", "B{M}{P}")],  # every message fills: never BNC
    ),
}
ALL_T_MODES = list(T_TABLES)


@dataclass(frozen=True)
class Example:
    name: str
    argv: tuple[str, ...]
    modes: tuple[str, ...]
    marker_sets: tuple[str, ...]


MARKER_SETS = {
    "default": DEFAULT,
    "printable": PRINTABLE,
    "printable-nl": PRINTABLE_NL,
    "nul-eom": Markers(eom=0x00, eop=0x0A, eob=0x17, bnc=0x11),  # messages may hold newlines
}


UPPERS = {
    "c": Example("c", ("{c_build}/upper",), tuple(ALL_T_MODES), ("default", "printable", "printable-nl", "nul-eom")),
    "node": Example("node", ("node", str(EXAMPLES / "upper.js")), tuple(ALL_T_MODES), ("default", "printable")),
    "python": Example("python", (PY, str(EXAMPLES / "upper.py")), tuple(ALL_T_MODES), ("default", "printable")),
    "sh": Example("sh", ("sh", str(EXAMPLES / "upper.sh")), ("single",), ("default", "printable-nl")),
    "sh-bytes": Example(
        "sh-bytes", ("sh", str(EXAMPLES / "upper_bytes.sh")), tuple(ALL_T_MODES), ("default", "printable", "nul-eom")
    ),
}


def _cases() -> list[object]:
    return [
        pytest.param(ex, mode, ms, id=f"{ex.name}-{mode}-{ms}")
        for ex in UPPERS.values()
        for mode in ex.modes
        for ms in ex.marker_sets
    ]


def _argv(example: Example, c_build: str) -> list[str]:
    return [a.format(c_build=c_build) for a in example.argv]


def _env() -> dict[str, str]:
    return {"PYTHONPATH": str(ROOT)}


def _with_path(env: dict[str, str]) -> dict[str, str]:
    return {**env, "PATH": os.environ.get("PATH", "/usr/bin:/bin")}


def assert_clean_end(done: Finished) -> None:
    assert done.rest == b"", f"bytes on stdout after the last reply: {done.rest[:200]!r}"
    assert done.code == 0, f"exit status {done.code}; stderr: {done.stderr[-800:]!r}"


@pytest.mark.parametrize(("example", "mode", "marker_set"), _cases())
def test_upper(example: Example, mode: str, marker_set: str, c_build: str, tmp_path: Path) -> None:
    if example.name == "node" and not shutil.which("node"):
        pytest.fail("node is not installed (CI must provide Node.js 20)")
    markers = MARKER_SETS[marker_set]
    settings, steps = T_TABLES[mode]
    scenario = Scenario(type="T", markers=markers, stage="upper", state_dir=str(tmp_path), **settings)  # type: ignore[arg-type]
    worker = WireWorker(_argv(example, c_build), scenario, _env())
    assert_clean_end(converse(worker, steps, markers))


# --- the L-worker: the same conversations, signals only, and the file holds every message --


LOADERS = {
    "python": Example("python", (PY, str(EXAMPLES / "append.py")), tuple(ALL_T_MODES), ("default", "printable")),
    "c": Example("c", ("{c_build}/append",), tuple(ALL_T_MODES), ("default", "printable")),
}


@pytest.mark.parametrize("marker_set", ["default", "printable"])
@pytest.mark.parametrize("mode", ALL_T_MODES)
@pytest.mark.parametrize("loader", list(LOADERS))
def test_append(loader: str, mode: str, marker_set: str, c_build: str, tmp_path: Path) -> None:
    markers = MARKER_SETS[marker_set]
    settings, steps = T_TABLES[mode]
    l_steps = [(send, loader_expectation(expect)) for send, expect in steps]
    out = tmp_path / "out.txt"
    out.write_bytes(b"existing\n")
    scenario = Scenario(type="L", markers=markers, stage="sink", state_dir=str(tmp_path), **settings)  # type: ignore[arg-type]
    worker = WireWorker([*_argv(LOADERS[loader], c_build), str(out)], scenario, _env())
    assert_clean_end(converse(worker, l_steps, markers))
    sent = b"".join(render(send, markers) for send, _ in steps).replace(markers.EOB, b"")
    loaded = sent.split(markers.EOM)[:-1]
    assert out.read_bytes() == b"existing\n" + b"".join(m + b"\n" for m in loaded)


@pytest.mark.parametrize("loader", list(LOADERS))
def test_append_acknowledges_only_after_the_write(loader: str, c_build: str, tmp_path: Path) -> None:
    """Each EOP comes after the batch is in the file (fsync'ed before the EOP is written)."""
    out = tmp_path / "out.txt"
    scenario = Scenario(type="L", mode="batch", batch_size=2, batch_driver="worker", state_dir=str(tmp_path))
    worker = WireWorker([*_argv(LOADERS[loader], c_build), str(out)], scenario, _env())
    try:
        assert worker.step(b"a\n", b"\x11") == b"\x11"
        assert not out.exists() or out.read_bytes() == b""
        assert worker.step(b"b\n", b"\x00") == b"\x00"
        assert out.read_bytes() == b"a\nb\n"
        assert_clean_end(worker.finish())
    finally:
        worker.kill()


# --- the E-worker ---------------------------------------------------------------------


COUNTERS = {
    "python": Example("python", (PY, str(EXAMPLES / "count.py")), ("plain", "cyclic"), ("default", "printable")),
    "sh": Example("sh", ("sh", str(EXAMPLES / "count.sh")), ("plain", "cyclic"), ("default", "printable-nl")),
}
COUNTER_CASES = [pytest.param(name, ms, id=f"{name}-{ms}") for name, ex in COUNTERS.items() for ms in ex.marker_sets]


def _count(counter: str, scenario: Scenario, total: str, per_cycle: int = 3) -> WireWorker:
    args = ["--per-cycle", str(per_cycle)] if counter == "python" else [str(per_cycle)]
    return WireWorker([*COUNTERS[counter].argv, total, *args], scenario, _env())


@pytest.mark.parametrize(("counter", "marker_set"), COUNTER_CASES)
def test_count_plain(counter: str, marker_set: str, tmp_path: Path) -> None:
    markers = MARKER_SETS[marker_set]
    worker = _count(counter, Scenario(type="E", mode="plain", markers=markers, state_dir=str(tmp_path)), "5")
    done = worker.finish()
    assert done.rest == render("1{M}2{M}3{M}4{M}5{M}", markers)
    assert done.code == 0, done.stderr


COUNT_CYCLIC_WORKER_OFFSETS: list[Step] = [
    ("{M}", "1{M}2{M}3{M}{P}"),
    ("{M}", "4{M}5{M}{P}"),
    ("{M}", "{P}"),  # after N: empty cycles
    ("{M}", "{P}"),
]


@pytest.mark.parametrize(("counter", "marker_set"), COUNTER_CASES)
def test_count_cyclic_worker_offsets(counter: str, marker_set: str, tmp_path: Path) -> None:
    markers = MARKER_SETS[marker_set]
    scenario = Scenario(type="E", mode="cyclic", offsets="worker", markers=markers, state_dir=str(tmp_path))
    assert_clean_end(converse(_count(counter, scenario, "5"), COUNT_CYCLIC_WORKER_OFFSETS, markers))
    assert (tmp_path / "count-0.offset").read_text().strip() == "5"


@pytest.mark.parametrize("counter", list(COUNTERS))
def test_count_commits_the_previous_cycle_on_the_next_request_never_on_eof(counter: str, tmp_path: Path) -> None:
    scenario = Scenario(type="E", mode="cyclic", offsets="worker", state_dir=str(tmp_path))
    markers = DEFAULT
    # run 1: two cycles; the second is never acknowledged (stdin closes instead)
    assert_clean_end(
        converse(_count(counter, scenario, "10"), [("{M}", "1{M}2{M}3{M}{P}"), ("{M}", "4{M}5{M}6{M}{P}")], markers)
    )
    assert (tmp_path / "count-0.offset").read_text().strip() == "3"
    # run 2: the unacknowledged window 4..6 is emitted again
    assert_clean_end(converse(_count(counter, scenario, "10"), [("{M}", "4{M}5{M}6{M}{P}")], markers))


@pytest.mark.parametrize("counter", list(COUNTERS))
def test_count_cyclic_supervisor_offsets(counter: str, tmp_path: Path) -> None:
    scenario = Scenario(type="E", mode="cyclic", offsets="supervisor", state_dir=str(tmp_path))
    steps: list[Step] = [
        ('{"start":0,"end":2}{M}', "1{M}2{M}{P}"),
        ('{"start":2,"end":4}{M}', "3{M}4{M}{P}"),
        ('{"start":4,"end":9}{M}', "5{M}{P}"),  # capped at N
        ('{"start":5,"end":9}{M}', "{P}"),
    ]
    assert_clean_end(converse(_count(counter, scenario, "5"), steps, DEFAULT))
    assert not (tmp_path / "count-0.offset").exists()


# --- start-up errors are clear and early ------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "env", "needle"),
    [
        (("sh", str(EXAMPLES / "upper.sh")), {"ETLSTAGE_MODE": "batch"}, b"single mode only"),
        (("sh", str(EXAMPLES / "upper.sh")), {"ETLSTAGE_EOP": "zz"}, b"ETLSTAGE_EOP=zz"),
        (("node", str(EXAMPLES / "upper.js")), {"ETLSTAGE_EOB": "1"}, b"ETLSTAGE_EOB=1"),
        (("sh", str(EXAMPLES / "count.sh"), "5"), {"ETLSTAGE_EOM": "7c"}, b"EOM must be 0a"),
        (("sh", str(EXAMPLES / "count.sh"), "-1"), {}, b"usage"),
        (("{c_build}/append",), {}, b"usage"),
        # a batch's id header would be appended as a line: refused, naming append.py
        (("{c_build}/append", "/dev/null"), {"ETLSTAGE_MODE": "batch", "ETLSTAGE_BATCH_ID": "1"}, b"use append.py"),
        (("{c_build}/upper",), {"ETLSTAGE_MODE": "batchy"}, b"batchy"),
        (("{c_build}/upper",), {"ETLSTAGE_EOB": "0a"}, b"distinct"),
    ],
)
def test_bad_environment_is_refused(argv: tuple[str, ...], env: dict[str, str], needle: bytes, c_build: str) -> None:
    full_env = _with_path(Scenario().to_env())
    full_env.update(env)
    proc = subprocess.run(
        [a.format(c_build=c_build) for a in argv], check=False, input=b"", capture_output=True, env=full_env, timeout=30
    )
    assert proc.returncode == 2
    assert proc.stdout == b""
    assert needle in proc.stderr


def test_sh_refuses_a_non_newline_eom_under_mawk() -> None:
    awk = subprocess.run(["awk", "-W", "version"], check=False, capture_output=True).stdout
    env = _with_path(Scenario(markers=PRINTABLE).to_env())
    proc = subprocess.run(
        ["sh", str(EXAMPLES / "upper.sh")], check=False, input=b"a|", capture_output=True, env=env, timeout=30
    )
    if b"mawk" in awk:
        assert proc.returncode == 2 and b"EOM must be 0a" in proc.stderr
    else:  # gawk / busybox awk: a printable EOM works
        assert proc.stdout == b"A|#"


@pytest.mark.parametrize("example", ["c", "node"])
def test_marker_on_stdin_is_a_protocol_error(example: str, c_build: str) -> None:
    argv = _argv(UPPERS[example], c_build)
    proc = subprocess.run(
        argv, check=False, input=b"a\n\x00", capture_output=True, env=_with_path(Scenario().to_env()), timeout=30
    )
    assert proc.returncode == 3
    assert b"EOP" in proc.stderr


def test_markers_object_is_what_the_tables_assume() -> None:
    assert Markers(eom=0x7C, eop=0x23, eob=0x7E, bnc=0x5E) == PRINTABLE


@pytest.mark.parametrize(("counter", "needle"), [("python", b"must be an integer"), ("sh", b"bad request")])
def test_count_refuses_a_request_it_cannot_read(counter: str, needle: bytes, tmp_path: Path) -> None:
    scenario = Scenario(type="E", mode="cyclic", offsets="supervisor", state_dir=str(tmp_path))
    worker = _count(counter, scenario, "5")
    try:
        worker.send(b'{"start":"2026-01-01T00:00:00Z","end":"2026-01-01T00:01:00Z"}\n')
        done = worker.finish()
    finally:
        worker.kill()
    assert done.rest == b""  # no partial answer
    assert done.code not in (0, None)
    assert needle in done.stderr
