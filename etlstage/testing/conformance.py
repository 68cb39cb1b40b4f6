"""The worker conformance checker: protocol checks any worker program must pass.

Every check drives the worker with the in-memory harness (the supervisor's own stage
driver), so a failure reads exactly like the supervisor's report: what was wrong, the
bytes seen, the worker's stderr.  Used by ``etlstage check-worker`` and by the
project's own tests, over subprocesses and in-process SDK workers alike.
"""

from __future__ import annotations

import collections
import os
import secrets
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from etlstage.config.model import PipelineConfig
from etlstage.conversation.policy import STARTUP_QUIET
from etlstage.errors import ConfigError
from etlstage.hint import command
from etlstage.kit.telling import says_missing
from etlstage.protocol.markers import DEFAULT_MARKERS, Markers
from etlstage.protocol.vocabulary import Mode, StageType
from etlstage.testing.harness import HarnessResult, StageHarness, WorkerFailed
from etlstage.testing.loadedonce import measure, reported_outputs

PRINTABLE = Markers(eom=ord("|"), eop=ord("#"), eob=ord("~"), bnc=ord("^"))
SAMPLE = [b"alpha", b"beta", b"", b"gamma", b"delta", b"epsilon", b"zeta"]


@dataclass
class CheckResult:
    name: str
    passed: bool
    detail: str = ""
    mode: str = ""  # the mode the check ran the worker in
    at_start: bool = False  # failed before the worker answered anything
    skipped: bool = False  # not run: the user's sample holds no message of the kind (detail: why)
    cause: str | None = None  # the telling line of the worker's stderr when it failed
    sends: bool = True  # the check sends the worker messages (a pass shows the mode works)
    partial: bool = False  # passed what it could see; detail: what it could not


@dataclass
class Options:
    type: str = "T"
    mode: str | None = None  # None: every mode of the type
    batch_driver: str | None = None
    batch_size: int = 3
    markers: Markers | None = None
    timeout: float = 20.0
    cycles: int = 3
    env: dict[str, str] = field(default_factory=dict)
    cwd: str | None = None  # where a worker process starts (a pipeline's stage: its folder)
    sample: list[bytes] | None = None  # the user's own messages (check-worker --sample), instead of SAMPLE
    batch_id: bool = False  # an L-stage given each batch's id (batch_id: true): supervisor-driven batches only


class SkipCheck(Exception):
    """The check cannot run on the user's sample (it holds no message of the kind needed)."""


@dataclass(frozen=True)
class Partial:
    """A check's outcome when it passed all it could see; ``note`` says what it could not."""

    note: str


def sample_of(o: Options) -> list[bytes]:
    return o.sample if o.sample is not None else SAMPLE


def read_sample(path: str) -> list[bytes]:
    """The messages of ``path``, one a line (an empty line: an empty message), UTF-8 or not."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as exc:
        raise ConfigError([f"--sample {path}: cannot read it: {exc.strerror or exc}"]) from None
    messages = data.split(b"\n")
    if messages and messages[-1] == b"":  # the last line's newline ends it, it starts no message
        messages.pop()
    messages = [m[:-1] if m.endswith(b"\r") else m for m in messages]
    if not messages:
        raise ConfigError([f"--sample {path}: the file is empty; write one message a line"])
    return messages


Check = Callable[[StageHarness, Any, Options], str | Partial | None]  # a problem, or None (or Partial) when passed


def _expect_groups(result: HarnessResult, expected_sizes: list[int], what: str) -> str | None:
    sizes = [len(b) for b in result.inputs]
    if sizes != expected_sizes:
        return f"expected {what} of {expected_sizes} message(s), the worker answered {sizes}"
    if result.exit_status not in (0, None):
        return f"expected exit status 0 after stdin closed, saw {result.exit_status}"
    return None


def _run(h: StageHarness, worker: Any, o: Options, **kw: Any) -> HarnessResult:
    kw.setdefault("markers", o.markers or DEFAULT_MARKERS)
    kw.setdefault("batch_id", o.batch_id)
    return h.run(worker, type=o.type, timeout=o.timeout, env=o.env, cwd=o.cwd, **kw)


def _batch_sizes(n: int, size: int) -> list[int]:
    return [min(size, n - i) for i in range(0, n, size)]


def check_single(h: StageHarness, w: Any, o: Options) -> str | None:
    r = _run(h, w, o, mode="single", inputs=sample_of(o), prefetch=1, settle=STARTUP_QUIET)
    return _expect_groups(r, [1] * len(sample_of(o)), "one EOP per request, requests")


def check_supervisor_batches(h: StageHarness, w: Any, o: Options) -> str | None:
    r = _run(
        h,
        w,
        o,
        mode="batch",
        batch_driver="supervisor",
        batch_size=o.batch_size,
        inputs=sample_of(o),
        prefetch=1,
        settle=STARTUP_QUIET,
    )
    return _expect_groups(r, _batch_sizes(len(sample_of(o)), o.batch_size), "EOB-closed batches")


def check_worker_batches(h: StageHarness, w: Any, o: Options) -> str | None:
    # BNC after each message short of the batch, never after the filling one; the last
    # batch is partial and closed by EOB. A batch's messages are written ahead of their
    # BNCs, as both engines write them: a worker that takes one read for one message fails.
    r = _run(
        h, w, o, mode="batch", batch_driver="worker", batch_size=o.batch_size, inputs=sample_of(o), settle=STARTUP_QUIET
    )
    return _expect_groups(r, _batch_sizes(len(sample_of(o)), o.batch_size), "BNC-driven batches")


def check_empty_messages(h: StageHarness, w: Any, o: Options) -> str | None:
    mode = o.mode or "single"
    inputs = [b"", b"", b""] if o.sample is None else [m for m in o.sample if not m]
    if not inputs:
        raise SkipCheck("the sample has no empty message (an empty line)")
    r = _run(
        h,
        w,
        o,
        mode=mode,
        batch_driver=o.batch_driver or "supervisor",
        batch_size=o.batch_size,
        inputs=inputs,
        prefetch=1,
    )
    sizes = _batch_sizes(len(inputs), 1 if mode == Mode.SINGLE else o.batch_size)
    return _expect_groups(r, sizes, "empty messages, groups")


NON_ASCII = ["café crème", "Grüße aus Köln", "日本語のテキスト", "emoji 🙂 ok"]


def _garbled(answer: bytes) -> str | None:
    """Why ``answer`` is not the UTF-8 text a worker should write back, or None."""
    try:
        text = answer.decode("utf-8")
    except UnicodeDecodeError as exc:
        return f"{answer!r} is not UTF-8 (byte 0x{answer[exc.start]:02x} at {exc.start})"
    if "\ufffd" in text:
        return f"{text!r} holds U+FFFD: characters were lost in decoding"
    for legacy in ("latin-1", "cp1252"):  # UTF-8 read as one of these and written again as UTF-8
        try:
            again = text.encode(legacy).decode("utf-8")
        except (UnicodeEncodeError, UnicodeDecodeError):
            continue
        if again != text:
            return f"{text!r} is UTF-8 encoded twice ({again!r} read as {legacy}): read stdin as UTF-8 or as bytes"
    return None


def check_non_ascii(h: StageHarness, w: Any, o: Options) -> str | None:
    # UTF-8 in, UTF-8 out: a worker that reads bytes as Latin-1 and writes UTF-8 turns é into Ã©
    mode = o.mode or "single"
    inputs = [m.encode() for m in NON_ASCII] if o.sample is None else [m for m in o.sample if not m.isascii()]
    if not inputs:
        raise SkipCheck("the sample has no message with non-ASCII text")
    r = _run(
        h,
        w,
        o,
        mode=mode,
        batch_driver=o.batch_driver or "supervisor",
        batch_size=o.batch_size,
        inputs=inputs,
        prefetch=1,
    )
    sizes = _batch_sizes(len(inputs), 1 if mode == Mode.SINGLE else o.batch_size)
    for answer in r.outputs:
        problem = _garbled(answer)
        if problem:
            return f"a UTF-8 message came back garbled: {problem}"
    return _expect_groups(r, sizes, "UTF-8 messages, groups")


CONTROL = Markers(eom=0x1E, eop=0x03, eob=0x04, bnc=0x05)


def _with_markers(markers: Markers, label: str) -> Check:
    """A check that runs the stage's own mode with other markers from ETLSTAGE_*."""

    def check(h: StageHarness, w: Any, o: Options) -> str | None:
        mode = o.mode or "single"
        r = _run(
            h,
            w,
            o,
            markers=markers,
            mode=mode,
            batch_driver=o.batch_driver or "supervisor",
            batch_size=o.batch_size,
            inputs=sample_of(o),
            prefetch=1,
        )
        sizes = _batch_sizes(len(sample_of(o)), 1 if mode == Mode.SINGLE else o.batch_size)
        return _expect_groups(r, sizes, f"groups with markers {label} from ETLSTAGE_*,")

    return check


check_printable_markers = _with_markers(PRINTABLE, "| # ~ ^")
check_control_markers = _with_markers(CONTROL, "1e 03 04 05")


def check_no_input(h: StageHarness, w: Any, o: Options) -> str | None:
    # stdin closed at once: the worker must exit 0 without writing anything
    r = _run(
        h,
        w,
        o,
        mode=o.mode or "single",
        batch_driver=o.batch_driver or "supervisor",
        batch_size=o.batch_size,
        inputs=[],
        settle=STARTUP_QUIET,
    )
    if r.batches:
        return f"wrote {r.batches!r} with no request"
    if r.exit_status not in (0, None):
        return f"expected exit status 0 when stdin closes at once, saw {r.exit_status}"
    return None


def check_extract_plain(h: StageHarness, w: Any, o: Options) -> str | None:
    r = _run(h, w, o, mode="plain")
    if r.exit_status not in (0, None):
        return f"expected exit status 0 at the end of a plain run, saw {r.exit_status}"
    return None if r.batches else "a plain run produced no window at all"


def check_extract_cyclic(h: StageHarness, w: Any, o: Options) -> str | None:
    r = _run(h, w, o, mode="cyclic", offsets="worker", cycles=o.cycles)
    if len(r.batches) != o.cycles:
        return f"expected {o.cycles} cycles each ended by EOP, saw {len(r.batches)}"
    if r.exit_status not in (0, None):
        return f"expected exit status 0 after stdin closed, saw {r.exit_status}"
    return None


def check_extract_printable(h: StageHarness, w: Any, o: Options) -> str | None:
    r = _run(h, w, o, mode="cyclic", offsets="worker", cycles=2, markers=PRINTABLE)
    return None if len(r.batches) == 2 else f"expected 2 cycles ended by EOP '#', saw {len(r.batches)}"


def _two_batches(o: Options) -> tuple[list[bytes], list[bytes]]:
    """A batch of the sample's messages to send twice, and a batch of others."""
    messages = sample_of(o)
    n = max(1, min(o.batch_size, len(messages) // 2))
    first, other = messages[:n], messages[n : 2 * n]
    if not other or other == first:
        raise SkipCheck("the sample needs two batches of different messages (at least two lines)")
    return first, other


RESENT_STEPS = (
    "the batch, sent first",
    "the same batch sent again with its id (as to a loader restarted after a crash)",
    "a new batch (another id)",
)


def check_resent_batch(h: StageHarness, w: Any, o: Options) -> str | Partial | None:
    # Each send goes to a new process, as after a crash: a loader that remembers ids only
    # in memory loads the batch again. Only the protocol and the output the worker
    # reports are visible from here; without a file or folder reported, half is checked.
    first, other = _two_batches(o)
    os.makedirs(h.tmp_dir, exist_ok=True)
    state_dir = tempfile.mkdtemp(prefix="resent-", dir=h.tmp_dir)  # this check's reports only
    pipeline = f"check-worker-{secrets.token_hex(4)}"  # ids no earlier check gave: new to the loader
    ids: list[list[str]] = []
    seen: list[dict[str, str]] = []
    outputs: list[str] = []
    for step, batch in zip(RESENT_STEPS, (first, first, other), strict=True):
        try:
            r = _run(
                h,
                w,
                o,
                mode="batch",
                batch_driver="supervisor",
                batch_size=len(batch),
                inputs=batch,
                prefetch=1,
                state_dir=state_dir,
                pipeline=pipeline,
                batch_id=True,
            )
        except WorkerFailed as exc:
            raise WorkerFailed(f"{step}: {exc}", exc.answered, exc.cause) from None
        problem = _expect_groups(r, [len(batch)], f"{step}: an EOP for the batch")
        if problem:
            return problem
        ids.append(r.ids)
        outputs = outputs or reported_outputs(state_dir)
        seen.append(measure(outputs, o.cwd))
    if ids[0] != ids[1] or ids[2] == ids[0]:
        raise RuntimeError(f"the harness gave batch ids {ids}: the same batch must keep its id, another not")
    if not seen[0]:
        said = f"reports its output as {', '.join(map(repr, outputs))}, no output" if outputs else "reports no output"
        return Partial(
            f"partly checked: the loader acknowledged each batch, but it {said} that is a file or folder "
            "here, so whether it loaded the batch sent again twice was not seen (a worker says where it "
            'loads with {"output": PATH} in its report file: docs/protocol.md, reports)'
        )
    for name, before in seen[0].items():
        again = seen[1].get(name)
        if again != before:
            return (
                f"{RESENT_STEPS[1]} was loaded again: {name} went from {before} to {again}. Commit the "
                "batch id with the data and skip a batch whose id is committed (docs/writing-workers.md: "
                "idempotent loaders)"
            )
    if seen[2] == seen[1]:
        shown = "; ".join(f"{name}: {d}" for name, d in seen[1].items())
        return f"{RESENT_STEPS[2]} was acknowledged but not loaded ({shown}, unchanged): skip only ids committed"
    return None


def mode_of(check: Check, o: Options) -> str:
    """The mode ``check`` runs the worker in under ``o``."""
    fixed: dict[Check, str] = {
        check_single: "single",
        check_supervisor_batches: "batch",
        check_worker_batches: "batch",
        check_extract_plain: "plain",
        check_extract_cyclic: "cyclic",
        check_extract_printable: "cyclic",
        check_resent_batch: "batch",
    }
    return fixed.get(check) or o.mode or "single"


def checks_for(o: Options) -> list[tuple[str, Check]]:
    if o.type == StageType.E:
        plan: list[tuple[str, Check]] = []
        if o.mode in (None, "plain"):
            plan.append(("plain run: messages, then exit 0", check_extract_plain))
        if o.mode in (None, "cyclic"):
            plan += [
                ("cyclic: one EOP per request, clean exit on stdin EOF", check_extract_cyclic),
                ("cyclic: printable markers from ETLSTAGE_*", check_extract_printable),
            ]
        return plan
    plan = []
    if o.batch_id:  # the stage's batches come with ids: supervisor-driven batches only, then the re-sent one
        plan.append(
            (
                f"batch, supervisor-driven (size {o.batch_size}) with batch ids: EOP per EOB-closed batch, "
                "partial last",
                check_supervisor_batches,
            )
        )
    if o.mode in (None, "single") and not o.batch_id:
        plan.append(("single: EOP after every request, nothing unasked on stdout", check_single))
    if o.mode in (None, "batch") and o.batch_driver in (None, "supervisor") and not o.batch_id:
        plan.append(
            (
                f"batch, supervisor-driven (size {o.batch_size}): EOP per EOB-closed batch, partial last",
                check_supervisor_batches,
            )
        )
    if o.mode in (None, "batch") and o.batch_driver in (None, "worker") and not o.batch_id:
        plan.append(
            (
                f"batch, worker-driven (size {o.batch_size}): BNC exactly when due, partial batch closed by EOB",
                check_worker_batches,
            )
        )
    plan += [
        ("empty messages", check_empty_messages),
        ("non-ASCII UTF-8 messages come back as UTF-8 (é, ü, 日本語, 🙂)", check_non_ascii),
        ("printable markers | # ~ ^ read from ETLSTAGE_*", check_printable_markers),
        ("control-byte markers 1e 03 04 05 read from ETLSTAGE_*", check_control_markers),
        ("stdin closed at once: exit 0, nothing written", check_no_input),
    ]
    if o.batch_id:
        plan.append(
            (
                "batch ids: a batch sent again with its id (as after a crash) is acknowledged and loaded once, "
                "a new batch is loaded",
                check_resent_batch,
            )
        )
    return plan


def declared(
    config: PipelineConfig, name: str, base: Options, batch_size: int | None
) -> tuple[list[str], Options, tuple[str, ...]]:
    """The command, options and modes of stage ``name`` as ``config`` declares it.

    ``base`` holds the checker's own settings; ``batch_size`` given on the command line wins.
    """
    stage = next((s for s in config.stages if s.name == name), None)
    if stage is None:
        raise ConfigError(
            [f"{config.source}: no stage {name!r}; its stages are {', '.join(s.name for s in config.stages)}"]
        )
    batch = stage.mode == Mode.BATCH
    options = replace(
        base,
        type=str(stage.type),
        batch_driver=str(stage.batch_driver) if batch else None,
        batch_size=batch_size or (stage.batch_size if batch else base.batch_size),
        markers=stage.markers,
        env=dict(stage.env),
        cwd=stage.cwd or config.base_dir,  # where the pipeline starts it
        batch_id=stage.batch_id,
    )
    return list(stage.command), options, (str(stage.mode),)


def run_checks(worker: Any, options: Options, harness: StageHarness | None = None) -> list[CheckResult]:
    h = harness or StageHarness()
    if options.batch_id:  # batch ids come only with batches the supervisor closes
        options = replace(options, mode="batch", batch_driver="supervisor")
    results = []
    for name, check in checks_for(options):
        at_start = False
        cause = None
        partial, note = False, ""
        try:
            outcome = check(h, worker, options)
            if isinstance(outcome, Partial):
                partial, note = True, outcome.note
            problem = None if isinstance(outcome, Partial) else outcome
        except SkipCheck as exc:
            results.append(CheckResult(name, True, str(exc), mode_of(check, options), skipped=True))
            continue
        except WorkerFailed as exc:
            problem, at_start, cause = str(exc), exc.answered == 0, exc.cause
        sends = check is not check_no_input
        detail = note if partial else problem or ""
        results.append(
            CheckResult(
                name,
                problem is None,
                detail,
                mode_of(check, options),
                at_start,
                cause=cause,
                sends=sends,
                partial=partial,
            )
        )
    return results


def unsupported_modes(results: list[CheckResult]) -> list[str]:
    """Modes in which every check failed before the worker answered: likely modes it refuses."""
    modes = dict.fromkeys(r.mode for r in results if r.mode and not r.skipped)
    return [m for m in modes if all(not r.passed and r.at_start for r in results if r.mode == m and not r.skipped)]


def working_modes(results: list[CheckResult]) -> list[str]:
    """Modes in which the worker answered messages correctly in some check (a check that
    sends nothing passing shows nothing of the mode)."""
    return list(dict.fromkeys(r.mode for r in results if r.passed and r.sends and not r.skipped))


def report(
    results: list[CheckResult],
    stage_type: str | None = None,
    sampled: bool = False,
    worker: list[str] | None = None,
) -> str:
    """The checks' outcomes and a closing note naming the likeliest cause of the failures:
    the worker's own words on stderr, a mode it refuses, the checks' messages it cannot parse.

    ``worker``: how check-worker was told the worker (``--stage NAME --pipeline FILE``, or
    ``--type T -- COMMAND…``), so that a suggested command is the user's own, pasteable."""
    lines = []
    for r in results:
        lines.append(f"{'SKIP' if r.skipped else 'PASS' if r.passed else 'FAIL'}  {r.name}")
        if r.detail:
            lines.extend(f"      {d}" for d in r.detail.splitlines())
    failed = sum(not r.passed for r in results)
    skipped = sum(r.skipped for r in results)
    partly = sum(r.partial for r in results)
    lines.append(
        f"{len(results) - failed - skipped} passed"
        + (f" ({partly} partly)" if partly else "")
        + f", {failed} failed"
        + (f", {skipped} skipped" if skipped else "")
    )
    if not failed:
        return "\n".join(lines)
    causes = collections.Counter(r.cause for r in results if not r.passed and r.cause)
    said = causes.most_common(1)[0][0] if causes else None
    if said:
        lines.append(f"note: the worker's stderr says: {said}")
    refused = unsupported_modes(results)
    working = [m for m in working_modes(results) if m not in refused]
    sent_any = any(r.sends and not r.passed for r in results)
    if refused and working:  # it answers in one mode and fails at once in another
        flags = [f for m in working for f in ("--mode", m)]
        told = worker or [*(["--type", stage_type] if stage_type else []), "--", "COMMAND"]
        cut = told.index("--") if "--" in told else len(told)
        lines.append(
            f"note: every {' and '.join(refused)} check failed before the worker answered its first request: "
            f"the worker may not support {' or '.join(refused)} mode. If it is not meant to, check only the "
            f"modes it supports: {command('check-worker', *told[:cut], *flags, *told[cut:])}"
        )
    elif said and not says_missing(said) and not sampled and stage_type in ("T", "L", None) and sent_any:
        shown = ", ".join(repr(m.decode()) for m in SAMPLE[:3])
        lines.append(
            f"note: the checks sent the worker their own messages ({shown}, …). If it expects input of a form "
            "of its own (JSON, CSV…), give it messages it accepts: --sample FILE (one message a line)"
        )
    elif refused and not said:
        lines.append("note: the worker failed before answering its first request in every mode: see its stderr above")
    return "\n".join(lines)
