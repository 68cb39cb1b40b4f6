"""Writes the protocol's test vectors (``sdk/vectors/*.json``) by running the Python SDK.

Each case below names a scenario (the ``ETLSTAGE_*`` environment), a handler and the
bytes the supervisor writes; the expected answers are what the Python SDK
(``etlstage.worker``) writes back, read through :func:`run_case`.  The same function
runs in ``tests/sdk/test_vectors.py``, so the files and the reference cannot drift.

    python sdk/vectors/generate.py          # rewrite the files
    python sdk/vectors/generate.py --check  # exit 1 if a file would change

The format is described in ``sdk/vectors/README.md``.
"""

from __future__ import annotations

import base64
import json
import os
import sys
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from etlstage.protocol.markers import DEFAULT_MARKERS
from etlstage.worker import Extractor, Loader, Request, Transformer, serve
from etlstage.worker.base import Worker
from etlstage.worker.runner import exit_status

HERE = Path(__file__).resolve().parent

# --- the handlers: every SDK's test implements these identically ---------------------


class Echo(Transformer):
    def process(self, messages: list[bytes]) -> Iterable[bytes]:
        return messages


class UpperAscii(Transformer):
    def process(self, messages: list[bytes]) -> Iterable[bytes]:
        return [m.upper() for m in messages]  # bytes.upper changes a-z only


class SplitComma(Transformer):
    def process(self, messages: list[bytes]) -> Iterable[bytes]:
        return [part for m in messages for part in m.split(b",")]


class Drop(Transformer):
    def process(self, messages: list[bytes]) -> Iterable[bytes]:
        return []


class CountBatch(Transformer):
    def __init__(self) -> None:
        self.batches = self.messages = 0

    def process(self, messages: list[bytes]) -> Iterable[bytes]:
        self.batches += 1
        self.messages += len(messages)
        return [str(len(messages)).encode()]

    def report(self) -> dict[str, object] | None:
        return {"batches": self.batches, "messages": self.messages}


class Collect(Loader):
    def __init__(self) -> None:
        self.loaded: list[list[bytes]] = []

    def load(self, messages: list[bytes]) -> None:
        self.loaded.append(list(messages))

    def report(self) -> dict[str, object] | None:
        return {"batches": len(self.loaded), "messages": sum(map(len, self.loaded))}


class Emit(Extractor):
    """Cycle ``i`` (plain mode: the run, cycle 0) emits ``cycles[i]``; later cycles nothing."""

    def __init__(self, cycles: list[list[bytes]]) -> None:
        self.cycles = cycles
        self.commits: list[int] = []

    def extract(self, request: Request | None) -> Iterable[bytes]:
        cycle = 0 if request is None else request.cycle
        return self.cycles[cycle] if cycle < len(self.cycles) else []

    def on_window_done(self, request: Request) -> None:
        self.commits.append(request.cycle - 1)


class EmitRange(Emit):
    """Supervisor-managed offsets: the integers ``start`` .. ``end - 1`` in decimal."""

    def __init__(self) -> None:
        super().__init__([])

    def extract(self, request: Request | None) -> Iterable[bytes]:
        assert request is not None
        return [str(i).encode() for i in range(int(request.start), int(request.end))]  # type: ignore[call-overload]


def make_handler(name: str, args: dict[str, Any]) -> Worker:
    if name == "emit":
        return Emit([[b64d(m) for m in cycle] for cycle in args["cycles"]])
    simple: dict[str, type[Worker]] = {
        "echo": Echo,
        "upper-ascii": UpperAscii,
        "split-comma": SplitComma,
        "drop": Drop,
        "count-batch": CountBatch,
        "collect": Collect,
        "emit-range": EmitRange,
    }
    return simple[name]()


REPORTING = {"count-batch", "collect"}

# --- the harness: chunked stdin, stdout seen only when flushed --------------------------


class ChunkedInput:
    """stdin as the vector's chunks, one per read; notes how much output was flushed
    before each read, so ``replies`` says what the worker answered from each chunk."""

    def __init__(self, chunks: list[bytes], out: FlushedOutput) -> None:
        self._chunks = list(chunks)
        self._out = out
        self.reads_at: list[int] = []

    def read1(self, n: int = -1) -> bytes:
        self.reads_at.append(len(self._out.flushed))
        return self._chunks.pop(0) if self._chunks else b""

    read = read1


class FlushedOutput:
    def __init__(self) -> None:
        self.flushed = bytearray()
        self._pending = bytearray()

    def write(self, data: bytes) -> int:
        self._pending += data
        return len(data)

    def flush(self) -> None:
        self.flushed += self._pending
        self._pending.clear()


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def b64d(text: str) -> bytes:
    return base64.b64decode(text, validate=True)


def run_case(case: dict[str, Any]) -> dict[str, Any]:
    """Run the Python SDK on a case (name, env, handler, args, stdin); return the
    case with its expected results (exit, replies, stdout, loaded, commits, report)."""
    handler = make_handler(case["handler"], case.get("args", {}))
    chunks = [b64d(c) for c in case["stdin"]]
    out = FlushedOutput()
    stdin = ChunkedInput(chunks, out)
    with tempfile.TemporaryDirectory() as state_dir:
        env = dict(case["env"])
        if case["handler"] in REPORTING:
            env["ETLSTAGE_STATE_DIR"] = state_dir
        try:
            with open(os.devnull, "w") as devnull:
                status = serve(handler, stdin=stdin, stdout=out, env=env, stderr=devnull)  # type: ignore[arg-type]
        except Exception as exc:
            status = exit_status(exc, case["name"])
        reports = sorted(Path(state_dir).glob("report-*.json"))
        report = json.loads(reports[-1].read_text()) if reports else None
    result = dict(case)
    result["exit"] = status
    if status != 0:
        # A failing worker's output is not part of the contract, only its exit status.
        result.update(replies=None, stdout=None, loaded=None, commits=None, report=None)
        return result
    assert not out._pending, "the SDK left output unflushed"
    # replies[0]: written before the first read; replies[i]: after chunk i-1 was read,
    # before the next read.  Nothing may follow the read that found end of input.
    total = len(out.flushed)
    marks = [*stdin.reads_at, total][: len(chunks) + 1]
    if len(stdin.reads_at) > len(chunks):
        assert stdin.reads_at[len(chunks)] == total, "output after end of input"
    while len(marks) < len(chunks) + 1:
        marks.append(total)
    replies = [bytes(out.flushed[a:b]) for a, b in zip([0, *marks[:-1]], marks, strict=True)]
    result["replies"] = [b64(r) for r in replies]
    result["stdout"] = b64(bytes(out.flushed))
    result["loaded"] = [[b64(m) for m in batch] for batch in handler.loaded] if isinstance(handler, Collect) else None
    result["commits"] = handler.commits if isinstance(handler, Emit) else None
    result["report"] = report
    return result


# --- the cases --------------------------------------------------------------------------


def env(
    type_: str, mode: str, batch_size: int = 1, driver: str = "supervisor", offsets: str = "worker", **markers: int
) -> dict[str, str]:
    m = {n: getattr(DEFAULT_MARKERS, n) for n in ("eom", "eop", "eob", "bnc")}
    m.update(markers)
    e = {f"ETLSTAGE_{n.upper()}": f"{v:02x}" for n, v in m.items()}
    e.update(
        ETLSTAGE_STAGE="s",
        ETLSTAGE_TYPE=type_,
        ETLSTAGE_MODE=mode,
        ETLSTAGE_BATCH_SIZE=str(batch_size),
        ETLSTAGE_BATCH_DRIVER=driver,
        ETLSTAGE_OFFSETS=offsets,
        ETLSTAGE_INSTANCE="0",
        ETLSTAGE_INSTANCES="1",
        ETLSTAGE_STATE_DIR="",
    )
    return e


@dataclass
class Case:
    name: str
    about: str
    env: dict[str, str]
    handler: str
    stdin: list[bytes] = field(default_factory=list)
    args: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"name": self.name, "about": self.about, "env": self.env, "handler": self.handler}
        if self.args:
            d["args"] = self.args
        d["stdin"] = [b64(c) for c in self.stdin]
        return d


def cycles(*cs: list[bytes]) -> dict[str, Any]:
    return {"cycles": [[b64(m) for m in c] for c in cs]}


CUSTOM: dict[str, Any] = {"eom": ord("|"), "eop": 0x03, "eob": 0x04, "bnc": 0x05}
BINARY = bytes([0x00, 0x0A, 0x11, 0x17, 0x80, 0xFF, 0xC3])  # default markers, a broken UTF-8 byte
SNOW = "☃ é".encode()

EXTRACTOR = [
    Case("e-plain", "plain: all messages, no EOP, exit 0", env("E", "plain"), "emit", args=cycles([b"a", b"b"])),
    Case("e-plain-nothing", "plain with nothing to emit writes nothing", env("E", "plain"), "emit", args=cycles([])),
    Case(
        "e-plain-empty-and-non-ascii",
        "empty messages are EOM alone; UTF-8 passes as bytes",
        env("E", "plain"),
        "emit",
        args=cycles([b"", SNOW, b""]),
    ),
    Case(
        "e-plain-custom-binary",
        "custom markers: the default marker bytes are ordinary payload",
        env("E", "plain", **CUSTOM),
        "emit",
        args=cycles([BINARY, b"x"]),
    ),
    Case(
        "e-cyclic-worker-offsets",
        "one cycle per empty request, EOP after each; commit cycle n-1 when request n arrives, never on EOF",
        env("E", "cyclic"),
        "emit",
        [b"\n", b"\n\n", b"\n"],
        cycles([b"a", b"b"], [], [b"c"]),
    ),
    Case(
        "e-cyclic-requests-in-one-read",
        "several requests in one read are answered in order",
        env("E", "cyclic"),
        "emit",
        [b"\n\n\n"],
        cycles([b"1"], [b"2", b""], [b"3"]),
    ),
    Case(
        "e-cyclic-no-request",
        "stdin closed before any request: nothing written, exit 0",
        env("E", "cyclic"),
        "emit",
        [],
        cycles([b"a"]),
    ),
    Case(
        "e-cyclic-custom-markers",
        "custom markers: the request is the custom EOM, the answer ends with the custom EOP",
        env("E", "cyclic", **CUSTOM),
        "emit",
        [b"|", b"|"],
        cycles([b"a\n\x00b"], [b""]),
    ),
    Case(
        "e-cyclic-supervisor-offsets",
        "supervisor-managed offsets: {start,end} requests, split across reads",
        env("E", "cyclic", offsets="supervisor"),
        "emit-range",
        [b'{"start": 0, "end": 3}\n{"start":3,', b'"end":5}', b"\n", b'{"start": 5, "end": 5}\n'],
    ),
]

T_SINGLE = env("T", "single")
T_BATCH = env("T", "batch", 3)
T_WORKER = env("T", "batch", 3, "worker")

TRANSFORMER = [
    Case("t-single-echo", "one EOP per message, answered chunk by chunk", T_SINGLE, "echo", [b"m1\nm2\n", b"m3\n"]),
    Case("t-single-empty-messages", "an empty message is EOM alone, in and out", T_SINGLE, "echo", [b"\n\nx\n\n"]),
    Case(
        "t-single-split-comma", "zero, one or many results per message", T_SINGLE, "split-comma", [b"a,b,c\n\nd\n,\n"]
    ),
    Case("t-single-drop", "no results: EOP alone", T_SINGLE, "drop", [b"a\nb\n"]),
    Case(
        "t-single-non-ascii",
        "UTF-8 bytes pass untouched (upper-ascii changes a-z only)",
        T_SINGLE,
        "upper-ascii",
        ["héllo ☃\nß\n".encode()],
    ),
    Case(
        "t-single-split-reads",
        "a message split across reads, a UTF-8 character split across reads, EOM alone in a read",
        T_SINGLE,
        "upper-ascii",
        [b"he", b"llo", b"\n", "é".encode()[:1], "é".encode()[1:] + b"x", b"\n", b"\n"],
    ),
    Case("t-single-byte-reads", "every byte its own read", T_SINGLE, "echo", [bytes([b]) for b in b"ab\n\nc\n"]),
    Case(
        "t-single-custom-binary",
        "custom markers: newline, NUL, 0x11, 0x17 and non-UTF-8 bytes are payload",
        env("T", "single", **CUSTOM),
        "echo",
        [BINARY + b"|", b"|x", b"|"],
    ),
    Case(
        "t-single-printable-markers",
        "printable custom markers",
        env("T", "single", eom=ord(";"), eop=ord("."), eob=ord("#"), bnc=ord("?")),
        "split-comma",
        [b"a,b;c;", b";"],
    ),
    Case(
        "t-single-eof-mid-message",
        "stdin closed inside a message: it is not processed, exit 0",
        T_SINGLE,
        "echo",
        [b"a\nb"],
    ),
    Case(
        "t-batch-supervisor",
        "EOB closes each batch; one answer per batch",
        T_BATCH,
        "count-batch",
        [b"m1\nm2\nm3\n\x17a\n\x17"],
    ),
    Case(
        "t-batch-supervisor-split",
        "batches split across reads; EOB alone in a read; an empty batch is answered with EOP alone",
        T_BATCH,
        "echo",
        [b"a\nb", b"\n", b"\x17", b"\x17c\n", b"\x17"],
    ),
    Case(
        "t-batch-supervisor-report",
        "reports: counters written before each EOP",
        T_BATCH,
        "count-batch",
        [b"a\nb\n\x17", b"c\n\x17\x17"],
    ),
    Case(
        "t-batch-supervisor-eof-unfinished",
        "stdin closed before EOB: the batch is not processed, exit 0",
        T_BATCH,
        "count-batch",
        [b"a\n\x17b\nc\n"],
    ),
    Case(
        "t-batch-supervisor-custom",
        "custom markers, many results per batch",
        env("T", "batch", 2, **CUSTOM),
        "split-comma",
        [b"a,b|\n|\x04", b"|\x04"],
    ),
    Case(
        "t-batch-worker",
        "BNC after messages 1 and 2 of 3, results and EOP after 3",
        T_WORKER,
        "echo",
        [b"m1\n", b"m2\n", b"m3\n", b"m4\n"],
    ),
    Case("t-batch-worker-partial", "EOB in answer to BNC closes the batch early", T_WORKER, "echo", [b"m1\n", b"\x17"]),
    Case(
        "t-batch-worker-one-read",
        "all in one read: BNC, BNC, results, BNC, then EOB",
        T_WORKER,
        "count-batch",
        [b"a\nb\nc\nd\n\x17"],
    ),
    Case(
        "t-batch-worker-size-one", "batch size 1: never BNC", env("T", "batch", 1, "worker"), "echo", [b"a\n", b"b\n"]
    ),
    Case(
        "t-batch-worker-eof",
        "stdin closed in the middle of a batch: exit 0, nothing more",
        T_WORKER,
        "echo",
        [b"a\n", b"b\n"],
    ),
    Case(
        "t-batch-worker-custom",
        "worker-driven with custom markers and empty messages",
        env("T", "batch", 2, "worker", **CUSTOM),
        "upper-ascii",
        [b"|", b"x\n|", b"y|", b"\x04"],
    ),
]

LOADER = [
    Case("l-single", "EOP alone per message, after it is loaded", env("L", "single"), "collect", [b"a\nb\n", b"\n"]),
    Case(
        "l-batch-supervisor",
        "one EOP per batch; an empty batch is acknowledged without a load",
        env("L", "batch", 3),
        "collect",
        [b"a\nb\n\x17c", b"\n\x17\x17"],
    ),
    Case(
        "l-batch-worker",
        "BNC, then EOP when the batch is full or closed",
        env("L", "batch", 2, "worker"),
        "collect",
        [b"a\n", b"b\n", b"c\n", b"\x17"],
    ),
    Case(
        "l-batch-supervisor-eof-unfinished",
        "stdin closed before EOB: the batch is not loaded nor acknowledged",
        env("L", "batch", 3),
        "collect",
        [b"a\n\x17b\n"],
    ),
    Case(
        "l-single-custom-binary",
        "custom markers, binary payload",
        env("L", "single", **CUSTOM),
        "collect",
        [BINARY + b"|" + SNOW[:2], SNOW[2:] + b"|"],
    ),
]

ID_A, ID_B = b"0123456789abcdef0123456789abcdef", b"fedcba9876543210fedcba9876543210"
LOADER.append(
    Case(
        "l-batch-id",
        "ETLSTAGE_BATCH_ID=1: each batch opens with a header holding its id, which the SDK strips and gives the loader; "
        "a batch of its header alone is acknowledged without a load",
        {**env("L", "batch", 3), "ETLSTAGE_BATCH_ID": "1"},
        "collect",
        [b"etlstage-batch-id " + ID_A + b"\na\nb\n\x17etlstage-batch-id ", ID_B + b"\n\x17"],
    )
)

ERRORS = [
    Case(
        "x-batch-id-missing",
        "ETLSTAGE_BATCH_ID=1 and a batch without its header: protocol violation, exit 3",
        {**env("L", "batch", 3), "ETLSTAGE_BATCH_ID": "1"},
        "collect",
        [b"a\nb\n\x17"],
    ),
    Case(
        "x-eob-in-single-mode",
        "EOB to a single-mode T-worker: protocol violation, exit 3",
        T_SINGLE,
        "echo",
        [b"a\n\x17"],
    ),
    Case(
        "x-eob-to-extractor",
        "EOB to a cyclic E-worker: exit 3",
        env("E", "cyclic"),
        "emit",
        [b"\n\x17"],
        cycles([b"a"]),
    ),
    Case("x-eop-from-supervisor", "EOP in the supervisor's input: exit 3", T_SINGLE, "echo", [b"a\x00\n"]),
    Case("x-bnc-from-supervisor", "BNC in the supervisor's input: exit 3", T_WORKER, "echo", [b"\x11"]),
    Case("x-eob-mid-message", "EOB before a message's EOM: exit 3", T_BATCH, "echo", [b"a\nb\x17"]),
    Case(
        "x-result-holds-marker",
        "a result holding a marker is refused, never written: exit 3",
        env("T", "single", eop=ord("A")),
        "upper-ascii",
        [b"a\n"],
    ),
    Case(
        "x-result-holds-eom", "a result holding EOM: exit 3", env("T", "single", eom=ord("A")), "upper-ascii", [b"aA"]
    ),
    Case(
        "x-bad-marker-hex",
        "ETLSTAGE_EOM not two hex digits: exit 2",
        {**T_SINGLE, "ETLSTAGE_EOM": "zz"},
        "echo",
        [b"a\n"],
    ),
    Case(
        "x-markers-not-distinct",
        "two markers the same byte: exit 2",
        {**T_SINGLE, "ETLSTAGE_EOB": "0a"},
        "echo",
        [b"a\n"],
    ),
    Case(
        "x-bad-mode", "a mode the type does not have: exit 2", {**T_SINGLE, "ETLSTAGE_MODE": "cyclic"}, "echo", [b"a\n"]
    ),
    Case("x-bad-type", "an unknown type: exit 2", {**T_SINGLE, "ETLSTAGE_TYPE": "X"}, "echo", [b"a\n"]),
    Case("x-bad-batch-size", "batch size 0: exit 2", {**T_BATCH, "ETLSTAGE_BATCH_SIZE": "0"}, "echo", [b"a\n"]),
    Case(
        "x-batch-size-not-a-number",
        "batch size not an integer: exit 2",
        {**T_BATCH, "ETLSTAGE_BATCH_SIZE": "3x"},
        "echo",
        [b"a\n"],
    ),
]

FILES = {"extractor": EXTRACTOR, "transformer": TRANSFORMER, "loader": LOADER, "errors": ERRORS}


def render() -> dict[str, str]:
    """Each file's text: a JSON list of vectors, one per case."""
    texts = {}
    for stem, cases in FILES.items():
        vectors = [run_case(c.as_dict()) for c in cases]
        texts[f"{stem}.json"] = json.dumps(vectors, indent=1, ensure_ascii=True) + "\n"
    return texts


def main(argv: list[str]) -> int:
    stale = []
    for name, text in render().items():
        path = HERE / name
        if path.exists() and path.read_text() == text:
            continue
        stale.append(name)
        if "--check" not in argv:
            path.write_text(text)
    if "--check" in argv and stale:
        print(f"stale vectors: {', '.join(stale)}; run python sdk/vectors/generate.py", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
