"""RDSS validation speed: the worker in batch mode (all checks on) beside the naive jsonschema path.

    python bench/rdss_validate.py [--count N] [--batch B] [--ldr-rows R]

Rows (messages/s; valid: the official 3.0.2 example message, compact, a fresh messageId each;
invalid: every message of the demo traffic (`etlstage-rdss demo-data`) that belongs in the
Invalid Message Queue - malformed JSON, bad UUIDs, expired, header and body problems,
unsupported messageType):
  json.loads only              - the floor: parsing alone
  naive jsonschema             - Draft4Validator over a `referencing` registry of the official schemas
  fastjsonschema (official)    - compiled by fastjsonschema, for comparison (if installed)
  compiled predicate           - the worker's own compiled schema, parse + check only
  MessageValidator.check       - every check: size, JSON, header, schema, sequence, expiry
  worker batch (in-memory)     - RdssTransformer through the SDK's serve(): framing, LDR (SQLite), output,
                                 its log lines (formatted, then discarded); each run starts on a fresh
                                 LDR, or with --ldr-rows on one already holding R messages
  ..., invalid mix             - the same paths over the invalid messages; "explained by jsonschema"
                                 is the naive way to say why (every problem listed by jsonschema)
"""

from __future__ import annotations

import argparse
import copy
import io
import json
import logging
import os
import shutil
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import jsonschema
import referencing
import referencing.jsonschema
from etlstage_workers.rdss.codes import INVALID_QUEUE_CODES
from etlstage_workers.rdss.demo import generate
from etlstage_workers.rdss.formats import FORMAT_CHECKS
from etlstage_workers.rdss.ldr import LocalDataRepository
from etlstage_workers.rdss.output import derived_message_id
from etlstage_workers.rdss.schemas import load_schema_set
from etlstage_workers.rdss.validate import MessageValidator
from etlstage_workers.rdss.worker import LDR_FILE, Options, RdssTransformer

from etlstage.protocol.scenario import Scenario
from etlstage.state.sqlite import immediate
from etlstage.worker import serve

OFFICIAL = ROOT / "tests" / "data" / "rdss" / "3.0.2"


def messages(n: int) -> list[bytes]:
    doc = json.loads((OFFICIAL / "messages" / "message.json").read_text())
    doc["messageHeader"]["messageTimings"]["expirationTimestamp"] = "2099-01-01T00:00:00Z"
    del doc["messageHeader"]["errorCode"], doc["messageHeader"]["errorDescription"]
    out = []
    for _ in range(n):
        d = copy.deepcopy(doc)
        d["messageHeader"]["messageId"] = str(uuid.uuid4())
        out.append(json.dumps(d, separators=(",", ":")).encode())
    return out


def invalid_mix(count: int) -> list[tuple[bytes, str]]:
    """The distinct invalid messages of ``count`` records of demo traffic (about 11% of them), with their codes."""
    records, expected = generate(count, seed=1)
    outcome = expected["messages"]
    mix: dict[bytes, str] = {}
    for raw in records:
        try:
            mid = json.loads(raw)["messageHeader"]["messageId"]
        except (ValueError, KeyError, TypeError):
            mid = derived_message_id(raw)
        code = outcome.get(mid, {}).get("errorCode")
        if code in INVALID_QUEUE_CODES:
            mix[raw] = code
    return list(mix.items())


def naive_validator() -> jsonschema.protocols.Validator:
    resources = []
    for path in list((OFFICIAL / "schemas").glob("*.json")) + list(OFFICIAL.rglob("*_schema.json")):
        doc = json.loads(path.read_text())
        resource = referencing.Resource.from_contents(doc, default_specification=referencing.jsonschema.DRAFT4)
        ident = doc["id"].split("#")[0]
        resources += [(ident, resource), (ident.rstrip("/"), resource)]
    registry = referencing.Registry().with_resources(resources)
    schema = json.loads((OFFICIAL / "messages" / "message_schema.json").read_text())
    return jsonschema.Draft4Validator(
        schema, registry=registry, format_checker=jsonschema.Draft4Validator.FORMAT_CHECKER
    )


def rate(fn, items: list[bytes], repeat: int = 3, prepare=lambda: None) -> tuple[float, float]:  # type: ignore[no-untyped-def]
    """Best of ``repeat`` runs: (messages per wall-clock second, messages per CPU second).

    CPU seconds are quoted too because the machine may be shared: they show the work itself.
    ``prepare`` runs before each run, untimed.
    """
    best_wall = best_cpu = float("inf")
    for _ in range(repeat):
        prepare()
        wall, cpu = time.perf_counter(), time.process_time()
        fn(items)
        best_wall = min(best_wall, time.perf_counter() - wall)
        best_cpu = min(best_cpu, time.process_time() - cpu)
    return len(items) / best_wall, len(items) / max(best_cpu, 1e-9)


def filled_ldr(path: Path, rows: int) -> None:
    """An LDR holding ``rows`` messages seen just now (so the worker's retention purge keeps them)."""
    ldr = LocalDataRepository(path)
    now = time.time()
    for done in range(0, rows, 10_000):
        with immediate(ldr.db):
            ids = (str(uuid.uuid4()) for _ in range(min(10_000, rows - done)))
            ldr.record([(i, "Command", "MetadataCreate", None, None, "valid") for i in ids], now)
    ldr.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    ldr.close()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--count", type=int, default=20000)
    ap.add_argument("--batch", type=int, default=500)
    ap.add_argument(
        "--ldr-rows", type=int, default=0, help="start each worker run on an LDR holding this many messages"
    )
    args = ap.parse_args()
    msgs = messages(args.count)
    small = msgs[: max(500, args.count // 20)]  # the naive path is slow: fewer messages
    rows: list[tuple[str, tuple[float, float]]] = []

    def run_loads(ms: list[bytes]) -> None:
        for m in ms:
            json.loads(m)

    rows.append(("json.loads only", rate(run_loads, msgs)))

    naive = naive_validator()

    def run_naive(ms: list[bytes]) -> None:
        for m in ms:
            assert naive.is_valid(json.loads(m))

    rows.append(("naive jsonschema (official, Draft4)", rate(run_naive, small, 1)))

    try:
        import fastjsonschema

        store = {}
        for path in list((OFFICIAL / "schemas").glob("*.json")):
            doc = json.loads(path.read_text())
            store[doc["id"].split("#")[0].rstrip("/")] = doc
        fast = fastjsonschema.compile(
            json.loads((OFFICIAL / "messages" / "message_schema.json").read_text()),
            handlers={"https": lambda uri: store[uri.split("#")[0].rstrip("/")]},
            formats=FORMAT_CHECKS,
        )

        def run_fast(ms: list[bytes]) -> None:
            for m in ms:
                fast(json.loads(m))

        rows.append(("fastjsonschema (official)", rate(run_fast, msgs)))
    except ImportError:
        pass

    schemas = load_schema_set("3.0.2")
    predicate = schemas.fast["message_MetadataCreate"]

    def run_predicate(ms: list[bytes]) -> None:
        for m in ms:
            assert predicate(json.loads(m))

    rows.append(("compiled predicate (etlstage schema)", rate(run_predicate, msgs)))
    validator = MessageValidator(schemas)

    def run_checks(ms: list[bytes]) -> None:
        for m in ms:
            assert validator.check(m).code is None

    rows.append(("MessageValidator.check (all checks)", rate(run_checks, msgs)))

    stdin = b"".join(
        b"".join(m + b"\n" for m in msgs[i : i + args.batch]) + b"\x17" for i in range(0, len(msgs), args.batch)
    )
    # The worker logs a line per invalid message: formatted as in production, then thrown away.
    sink = logging.getLogger("etlstage.rdss")
    sink.addHandler(logging.StreamHandler(open(os.devnull, "w")))  # noqa: SIM115
    sink.propagate = False

    scratch = tempfile.TemporaryDirectory()
    template = Path(scratch.name) / "template.sqlite"
    if args.ldr_rows:
        filled_ldr(template, args.ldr_rows)
    states: list[Path] = []

    def new_state() -> None:  # a state directory per run: a fresh LDR (every messageId is new), or a filled one
        states.append(Path(tempfile.mkdtemp(dir=scratch.name)))
        if args.ldr_rows:
            shutil.copyfile(template, states[-1] / LDR_FILE)

    def worker_run(frames: bytes, expected: int, invalid: bool) -> None:
        state = str(states[-1])
        worker = RdssTransformer(Options(state_dir=state))
        sc = Scenario(type="T", mode="batch", batch_size=args.batch, state_dir=state)
        out = io.BytesIO()
        serve(worker, stdin=io.BytesIO(frames), stdout=out, scenario=sc)
        got = out.getvalue()
        assert got.count(b"\n") == expected and got.count(b'"errorCode"') == (expected if invalid else 0)

    ldr = f", {args.ldr_rows:,} rows" if args.ldr_rows else ""
    rows.append(
        (
            f"worker, batches of {args.batch} (serve, LDR on{ldr})",
            rate(lambda ms: worker_run(stdin, len(ms), False), msgs, prepare=new_state),
        )
    )

    mix = invalid_mix(4 * args.count)  # about 0.44 x count invalid messages: the worker's start-up stays small
    bad = [raw for raw, _ in mix]
    codes = [code for _, code in mix]

    def run_invalid(ms: list[bytes]) -> None:
        for m, code in zip(ms, codes, strict=True):
            assert validator.check(m).code == code

    jsonschema_only = MessageValidator(load_schema_set("3.0.2"))
    # No compiled problem lister: SchemaSet.why() asks jsonschema, the way every rejection was explained before.
    jsonschema_only.schemas.problems = dict.fromkeys(jsonschema_only.schemas.roots)

    def run_invalid_jsonschema(ms: list[bytes]) -> None:
        for m, code in zip(ms, codes, strict=True):
            assert jsonschema_only.check(m).code == code

    rows.append(("invalid mix, explained by jsonschema", rate(run_invalid_jsonschema, bad, 1)))
    rows.append(("MessageValidator.check, invalid mix", rate(run_invalid, bad)))
    bad_stdin = b"".join(
        b"".join(m + b"\n" for m in bad[i : i + args.batch]) + b"\x17" for i in range(0, len(bad), args.batch)
    )
    rows.append(
        (
            f"worker, batches of {args.batch}, invalid mix{ldr}",
            rate(lambda ms: worker_run(bad_stdin, len(ms), True), bad, prepare=new_state),
        )
    )
    scratch.cleanup()

    naive_cpu = rows[1][1][1]
    share = {c: codes.count(c) for c in sorted(set(codes))}
    print(f"RDSS validation: {args.count} valid messages of {len(msgs[0])} bytes (naive path: {len(small)}), best of 3")
    print(f"invalid mix: {len(bad)} messages of the demo traffic, {share}")
    width = max(len(name) for name, _ in rows)
    print(f"{'path':<{width}} {'msg/s wall':>11} {'msg/s CPU':>10} {'x naive':>8}")
    for name, (wall, cpu) in rows:
        print(f"{name:<{width}} {wall:>11,.0f} {cpu:>10,.0f} {cpu / naive_cpu:>8.1f}")


if __name__ == "__main__":
    main()
