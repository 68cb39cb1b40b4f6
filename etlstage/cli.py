"""``etlstage``: run, validate and inspect pipelines.

Exit codes: 0 done, 1 pipeline failure, 2 usage or configuration error.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import click

from etlstage import __version__
from etlstage.config.listen import parse_listen
from etlstage.config.loader import load_config, schema
from etlstage.config.model import PipelineConfig
from etlstage.engines import KINDS, engine_for, engine_that_ran
from etlstage.engines.base import RunOptions
from etlstage.errors import ConfigError, EtlstageError
from etlstage.hint import command
from etlstage.logs import FORMATS, escape_controls, log_env, setup_logging
from etlstage.redact import redact_argv

log = logging.getLogger("etlstage")


class _Commands(click.Group):
    """The one place an :class:`EtlstageError` from any command (or subcommand) becomes its
    message on stderr and its exit code: 1 a pipeline failure, 2 a usage, configuration or
    state problem."""

    def invoke(self, ctx: click.Context) -> object:
        try:
            return super().invoke(ctx)
        except EtlstageError as exc:
            click.echo(f"etlstage: {exc}", err=True)
            ctx.exit(exc.exit_code)


def _log_options(fn):
    fn = click.option(
        "--log-format",
        type=click.Choice(FORMATS),
        default=None,
        envvar="ETLSTAGE_LOG_FORMAT",
        help="text (default), json, or syslog (RFC 5424).",
    )(fn)
    fn = click.option(
        "--log-level", default=None, envvar="ETLSTAGE_LOG_LEVEL", help="DEBUG, INFO (default), WARNING..."
    )(fn)
    fn = click.option(
        "--syslog-address",
        default=None,
        envvar="ETLSTAGE_SYSLOG_ADDRESS",
        help="With --log-format syslog: /dev/log, udp://host:514 or tcp://host:514 instead of stderr.",
    )(fn)
    fn = click.option(
        "--syslog-facility",
        default=None,
        envvar="ETLSTAGE_SYSLOG_FACILITY",
        type=click.Choice([f"local{i}" for i in range(8)]),
        help="syslog facility (default local0).",
    )(fn)
    return fn


@click.group(cls=_Commands, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="etlstage")
def main() -> None:
    """etlstage: run ETL pipelines of workers written in any language.

    A supervisor spawns the Extract, Transform and Load workers listed in a
    stages.yaml and drives them over stdin/stdout with the marker protocol
    (docs/protocol.md).
    """


@main.command()
@click.argument("pipeline_file", type=click.Path(dir_okay=False), default="stages.yaml")
@click.option("--once", is_flag=True, help="Stop when the extractors have nothing more and everything is loaded.")
@click.option("--progress/--no-progress", default=True, help="Live progress on a terminal, periodic lines otherwise.")
@click.option(
    "--http",
    "http",
    default=None,
    metavar="HOST:PORT",
    help="Serve the status page, /api/status and Prometheus /metrics here (port 0: any free port; "
    "loopback unless a host is given; no authentication). Overrides stages.yaml's http.",
)
@click.option(
    "--engine",
    type=click.Choice(KINDS),
    default=None,
    help="supervisor (processes of this machine) or spark (one Spark streaming query); default: engine.kind.",
)
@click.option("--master", default=None, help="With --engine spark: the Spark master URL (default: engine.master).")
@click.option(
    "--metrics-file",
    default=None,
    metavar="PATH",
    help="Write the run's Prometheus metrics here every few seconds and at the end, atomically "
    "(node-exporter's textfile format: name it *.prom in the collector's folder).",
)
@click.option(
    "--pushgateway",
    default=None,
    metavar="URL",
    help="Push the run's Prometheus metrics to this Pushgateway at its end (job: the pipeline's name).",
)
@_log_options
def run(
    pipeline_file: str,
    once: bool,
    progress: bool,
    http: str | None,
    engine: str | None,
    master: str | None,
    metrics_file: str | None,
    pushgateway: str | None,
    log_format: str | None,
    log_level: str | None,
    syslog_address: str | None,
    syslog_facility: str | None,
) -> None:
    """Run the pipeline in PIPELINE_FILE (default: stages.yaml)."""
    setup_logging("etlstage", log_format, level=log_level, syslog_address=syslog_address, facility=syslog_facility)
    config = _engine(load_config(pipeline_file), engine, master)
    chosen = engine_for(config.engine.kind)
    chosen.prepare(config)
    if http is not None:
        config = dataclasses.replace(config, http=parse_listen(http, "--http"))
    export = None
    if metrics_file or pushgateway:  # prometheus_client is imported only when asked for
        from etlstage.observe.export import RunExport, Targets, check_file, check_gateway

        targets = Targets(
            check_file(metrics_file) if metrics_file else None, pushgateway and check_gateway(pushgateway)
        )
        export = RunExport(targets, config.name)
    env = log_env(log_format, log_level, syslog_address, syslog_facility)
    lock = _claim(config, pipeline_file, chosen.kind)  # before any worker, service or JVM starts

    from etlstage.state.lastrun import RunRecorder

    ended = RunRecorder(config.state_dir, chosen.kind)  # status shows how the run ended
    previous = lock.previous.last_engine if lock.previous else ""
    code = chosen.run(config, RunOptions(once, progress, env, previous, export))
    if export is not None:
        export.end(code)
    code = ended.end(code)
    lock.release()  # after the run's end is recorded in the state it held
    sys.exit(code)


def _claim(config: PipelineConfig, pipeline_file: str, engine: str, what: str = "run"):
    """The pipeline's state, held for this process (:mod:`etlstage.state.claim`)."""
    from etlstage.state.claim import claim

    return claim(config.state_dir, engine, pipeline_file, _shares_state(config), what)


@main.command()
@click.argument("pipeline_file", type=click.Path(dir_okay=False), default="stages.yaml")
def validate(pipeline_file: str) -> None:
    """Check PIPELINE_FILE against the schema; report every problem with its line."""
    config = _engine(load_config(pipeline_file), None, None)
    _check_commands(pipeline_file, config)
    chain = " → ".join(f"{s.name} ({s.type}, {s.mode})" for s in config.stages)
    click.echo(f"{pipeline_file}: valid. {chain}")
    shared = _shared_state(config, pipeline_file)
    if shared:
        click.echo(f"etlstage: warning: {shared}; `etlstage run` refuses to run it so", err=True)


def _shared_state(config: PipelineConfig, pipeline_file: str) -> str | None:
    """What ``run`` would refuse: another pipeline file that ran last with this state."""
    from etlstage.state.claim import shared_state
    from etlstage.state.runlock import last_holder

    if not Path(config.state_dir).is_dir():
        return None
    return shared_state(
        last_holder(config.state_dir), os.path.realpath(pipeline_file), config.state_dir, _shares_state(config)
    )


def _shares_state(config: PipelineConfig) -> Callable[[str], bool]:
    def shares_state(other: str) -> bool:
        try:
            return load_config(other).state_dir == config.state_dir
        except EtlstageError:
            return False

    return shares_state


def _check_commands(pipeline_file: str, config: PipelineConfig) -> None:
    """Every stage's program is found as the run would find it, and its script exists."""
    from etlstage.kit.transport import command_problem

    problems = []
    for s in config.stages:
        env = {**os.environ, **s.env}
        cwd = s.cwd or config.base_dir  # as the run starts it
        problem = command_problem(list(s.command), env, cwd)
        if problem:
            problems.append(f"stage {s.name!r}: command {redact_argv(s.command)!r}: {problem}")
    if problems:
        raise ConfigError(problems, pipeline_file)


def _engine(config: PipelineConfig, engine: str | None, master: str | None) -> PipelineConfig:
    """The engine block with --engine / --master applied, checked for the engine chosen."""
    from etlstage.spark.driver.config import apply_flags

    return apply_flags(config, engine, master)


@main.command("schema")
def schema_cmd() -> None:
    """Print the JSON Schema of stages.yaml (for editors' completion and checks)."""
    click.echo(json.dumps(schema(), indent=2))


def _store(pipeline_file: str):
    from etlstage.state.layout import migrate_flat
    from etlstage.state.store import existing_store

    config = load_config(pipeline_file)
    migrate_flat(config.state_dir)
    return config, existing_store(config.state_dir)


def _when(ts: float | None) -> str:
    if ts is None:
        return "-"
    return dt.datetime.fromtimestamp(ts, dt.UTC).strftime("%Y-%m-%d %H:%M:%SZ")


@main.command()
@click.argument("pipeline_file", type=click.Path(dir_okay=False), default="stages.yaml")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.option("--watch", is_flag=True, help="Refresh in place until Ctrl-C.")
@click.option(
    "--interval", type=click.FloatRange(0.2), default=2.0, show_default=True, help="Seconds between refreshes."
)
def status(pipeline_file: str, as_json: bool, watch: bool, interval: float) -> None:
    """Committed offsets, windows in flight with their age, dead letters, and the running supervisor with rates."""
    from etlstage.state.layout import migrate_flat
    from etlstage.state.runlock import last_holder

    config = load_config(pipeline_file)
    migrate_flat(config.state_dir)
    last = last_holder(config.state_dir)
    # the engine that ran the pipeline last, whatever the file says now
    show = engine_that_ran(last.last_engine if last else "", config.engine.kind).status(config, as_json=as_json)
    if not watch:
        click.echo(show())
        return
    tty = sys.stdout.isatty()
    # Ctrl-C (or SIGTERM) ends the loop at its next turn wherever it lands: a KeyboardInterrupt
    # raised inside show() could be caught on its way out by code that reads the state
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    while not stop.is_set():
        text = show()
        if stop.is_set():
            break
        # on a terminal: home, draw, clear what the previous frame left below
        click.echo("\x1b[H" + text.replace("\n", "\x1b[K\n") + "\x1b[K\x1b[J" if tty else text + "\n")
        stop.wait(interval)


@main.group()
def deadletter() -> None:
    """Inspect and re-inject messages that failed under on_failure: deadletter."""


@deadletter.command("list")
@click.argument("pipeline_file", type=click.Path(dir_okay=False), default="stages.yaml")
@click.option("--stage", default=None, help="Only this stage.")
def deadletter_list(pipeline_file: str, stage: str | None) -> None:
    """One line per dead letter of PIPELINE_FILE (default: stages.yaml): id, time, stage,
    messages, tries, status and the first line of its error."""
    _, store = _store(pipeline_file)
    rows = store.deadletters(stage=stage)
    if not rows:
        click.echo("no dead letters")
    for d in rows:
        first = d.error.splitlines()[0] if d.error else ""
        click.echo(
            f"#{d.id:<5} {_when(d.created_at)} stage {d.stage!r} {d.messages} message(s) "
            f"attempts {d.attempts} [{d.status}] {first[:100]}"
        )


@deadletter.command("show")
@click.argument("args", nargs=-1, metavar="[PIPELINE_FILE] IDENT")
def deadletter_show(args: tuple[str, ...]) -> None:
    """Dead letter IDENT of PIPELINE_FILE (default: stages.yaml) in full: its stage, tries,
    status, error and messages."""
    pipeline_file, ident = _file_and_ident(args)
    _, store = _store(pipeline_file)
    d = store.deadletter(ident)
    if d is None:
        raise ConfigError([f"no dead letter #{ident} ({command('deadletter', 'list', pipeline_file)} shows them)"])
    click.echo(f"#{d.id} stage {d.stage!r} at {_when(d.created_at)}, {d.attempts} attempts, status {d.status}")
    click.echo("error:\n  " + d.error.replace("\n", "\n  "))
    click.echo(f"messages ({d.messages}):")
    for m in d.split():
        click.echo("  " + repr(m)[2:-1][:2000])


def _file_and_ident(args: tuple[str, ...]) -> tuple[str, int]:
    """``[PIPELINE_FILE] IDENT``, the file first as every subcommand takes it; the older
    ``IDENT [PIPELINE_FILE]`` still works, with a note."""
    usage = "expected [PIPELINE_FILE] IDENT, e.g. " + command("deadletter", "show", "stages.yaml", "1")
    if len(args) == 1 and args[0].isdigit():
        return "stages.yaml", int(args[0])
    if len(args) == 2 and args[1].isdigit():
        return args[0], int(args[1])
    if len(args) == 2 and args[0].isdigit():
        click.echo(
            f"etlstage: note: the pipeline file comes first now: {command('deadletter', 'show', args[1], args[0])}",
            err=True,
        )
        return args[1], int(args[0])
    raise ConfigError([f"{' '.join(args) or 'nothing'}: {usage}"])


@deadletter.command("replay")
@click.argument("args", nargs=-1, metavar="[PIPELINE_FILE] [IDENT]...")
@click.option("--all", "everything", is_flag=True, help="Every new dead letter.")
@click.option("--pipeline", "pipeline_option", default=None, hidden=True)  # the older spelling
def deadletter_replay(args: tuple[str, ...], everything: bool, pipeline_option: str | None) -> None:
    """Mark dead letters IDENT... (or --all new ones) of PIPELINE_FILE (default:
    stages.yaml) to be sent again to their stage by the next `etlstage run`."""
    files = [a for a in args if not a.isdigit()]
    if len(files) + (pipeline_option is not None) > 1:
        raise ConfigError([f"one pipeline file at most, got {', '.join(files + [pipeline_option or ''])}"])
    pipeline_file = (files or [pipeline_option or "stages.yaml"])[0]
    idents = [int(a) for a in args if a.isdigit()]
    config, store = _store(pipeline_file)
    lock = _claim(config, pipeline_file, "deadletter", "mark dead letters for replay")  # not while a run is on
    ids = [d.id for d in store.deadletters(status="new")] if everything else list(idents)
    if not ids:
        raise ConfigError(
            [f"name dead letters to replay (ids from `{command('deadletter', 'list', pipeline_file)}`) or use --all"]
        )
    known = {d.id for d in store.deadletters()}
    missing = [i for i in ids if i not in known]
    if missing:
        raise ConfigError([f"no dead letter(s) {', '.join(f'#{i}' for i in missing)}"])
    n = store.set_deadletter_status(ids, "replay")
    lock.release()
    click.echo(f"{n} dead letter(s) will be sent again to their stage by the next run")


@main.command("check-worker", context_settings={"ignore_unknown_options": True})
@click.option("--type", "stage_type", type=click.Choice(["E", "T", "L"]), help="The worker's stage type.")
@click.option(
    "--mode",
    "modes",
    type=click.Choice(["plain", "cyclic", "single", "batch"]),
    multiple=True,
    help="Check this mode (repeatable: --mode single --mode batch); default: every mode of the type.",
)
@click.option(
    "--stage",
    default=None,
    help="Check the worker of this stage of --pipeline as the pipeline declares it: its command, type, mode, "
    "batch settings, markers, env and folder (instead of --type and COMMAND).",
)
@click.option(
    "--pipeline",
    "pipeline_file",
    type=click.Path(dir_okay=False),
    default="stages.yaml",
    show_default=True,
    help="The pipeline file of --stage.",
)
@click.option(
    "--batch-driver",
    type=click.Choice(["supervisor", "worker"]),
    default=None,
    help="Batch mode: check one batch driver only.",
)
@click.option("--batch-size", type=click.IntRange(1), default=None, help="Batch mode: messages a batch (default 3).")
@click.option("--markers", default=None, help="Markers for the default checks, e.g. eom=0x7c,eop=#,eob=~,bnc=^")
@click.option("--timeout", type=float, default=20.0, show_default=True, help="Seconds per request.")
@click.option(
    "--sample",
    "sample_file",
    type=click.Path(dir_okay=False),
    default=None,
    help="Messages the worker accepts, one a line (e.g. JSON lines): every check sends these instead of "
    "its own; a check needing an empty or non-ASCII message runs only if the file has one.",
)
@click.option(
    "--batch-id",
    is_flag=True,
    help="An L-worker of a stage with batch_id: true: send each batch's id first, in supervisor-driven "
    "batches, and check that a batch sent again with its id (as after a crash) is loaded once.",
)
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
def check_worker(
    stage_type: str | None,
    modes: tuple[str, ...],
    stage: str | None,
    pipeline_file: str,
    batch_driver: str | None,
    batch_size: int | None,
    markers: str | None,
    timeout: float,
    sample_file: str | None,
    batch_id: bool,
    command: tuple[str, ...],
) -> None:
    """Run the protocol conformance checks against a worker: etlstage check-worker --type T -- ./my-worker ARGS,
    or the worker of a pipeline's stage: etlstage check-worker --stage NAME [--pipeline stages.yaml]"""
    from etlstage.protocol.markers import Markers
    from etlstage.protocol.vocabulary import MODES as MODES_OK
    from etlstage.testing.conformance import Options, declared, read_sample, report, run_checks

    sample = read_sample(sample_file) if sample_file is not None else None
    base = Options(batch_size=batch_size or 3, timeout=timeout, sample=sample, batch_id=batch_id)
    if stage is not None:
        if command or stage_type:
            raise ConfigError(["--stage takes the command and type from the pipeline: give no COMMAND or --type"])
        argv, base, declared_modes = declared(load_config(pipeline_file), stage, base, batch_size)
        command, stage_type, modes = tuple(argv), base.type, modes or declared_modes
    elif not command or not stage_type:
        raise ConfigError(["give --type and the worker's COMMAND after --, or --stage NAME of a pipeline"])
    if sample is not None and stage_type == "E":
        raise ConfigError(["--sample: an E-stage worker is sent no messages; give --sample to a T or L worker"])
    if base.batch_id:  # given, or the stage's batch_id: true
        if stage_type != "L" or set(modes) - {"batch"} or batch_driver == "worker":
            raise ConfigError(["--batch-id: batch ids are for L-workers in batch mode with supervisor-driven batches"])
        modes = ("batch",)
    for mode in modes:
        if mode not in MODES_OK[stage_type]:
            raise ConfigError(
                [f"--mode {mode} is not a mode of a {stage_type}-stage ({', '.join(MODES_OK[stage_type])})"]
            )
    try:
        m = Markers.from_mapping(dict(kv.split("=", 1) for kv in markers.split(","))) if markers else base.markers
    except (ValueError, EtlstageError) as exc:
        raise ConfigError([f"--markers {markers!r}: {exc} (expected e.g. eom=0x7c,eop=#)"])
    results = []
    checked: list[str | None] = list(dict.fromkeys(modes)) or [None]  # None: every mode of the type
    for one in checked:
        opts = dataclasses.replace(
            base, type=stage_type, mode=one, batch_driver=batch_driver or base.batch_driver, markers=m
        )
        for r in run_checks(list(command), opts):
            if len(set(modes)) > 1 and not r.name.startswith(r.mode):
                r.name = f"{r.mode}: {r.name}"  # a check every mode runs, told apart
            results.append(r)
    told = (
        ["--stage", stage, "--pipeline", pipeline_file]
        if stage is not None
        else ["--type", str(stage_type), "--", *command]
    )
    if sample_file is not None:
        told[:0] = ["--sample", sample_file]
    click.echo(report(results, stage_type, sampled=sample is not None, worker=told))
    sys.exit(0 if all(r.passed for r in results) else 1)


@main.command()
@click.argument("args", nargs=-1, required=True)
@click.option("--limit", type=click.IntRange(1), default=None, help="Stop after this many messages.")
@click.option("--json", "as_json", is_flag=True, help="One JSON document a line, as the pipeline sends them.")
def tap(args: tuple[str, ...], limit: int | None, as_json: bool) -> None:
    """Show the messages leaving STAGE of the running pipeline, live, without disturbing it:
    etlstage tap [PIPELINE_FILE] STAGE (default stages.yaml; an L-stage: the messages it is given).
    A tap that reads slower than the stage writes loses messages, and says how many."""
    from etlstage.state.runlock import holder

    if len(args) > 2:
        raise ConfigError([f"expected [PIPELINE_FILE] STAGE, got {len(args)} arguments"])
    pipeline_file, stage = (args[0], args[1]) if len(args) == 2 else ("stages.yaml", args[0])
    config = load_config(pipeline_file)
    stages = {s.name: s for s in config.stages}
    if stage not in stages:
        raise ConfigError([f"no stage {stage!r} in {pipeline_file} (its stages: {', '.join(stages)})"])
    running = holder(config.state_dir)
    engine = engine_that_ran(running.engine if running is not None else "", config.engine.kind)
    if not engine.supports_tap:
        raise ConfigError([engine.tap_refusal(config)])
    opened = engine.open_tap(config, stage)
    click.echo(f"etlstage tap: stage {stage!r} of {config.name!r}: {opened.offered}", err=True)
    shown = 0
    try:
        for doc in opened.documents:
            if as_json:
                click.echo(json.dumps(doc, ensure_ascii=False))
            elif "message" in doc:
                click.echo(escape_controls(str(doc["message"])))
            elif "dropped" in doc:
                click.echo(
                    f"etlstage tap: {doc['dropped']} message(s) dropped so far: this tap reads slower than the "
                    "stage writes (the pipeline is not slowed)",
                    err=True,
                )
            elif "end" in doc:
                click.echo(f"etlstage tap: {doc['end']}", err=True)
            shown += "message" in doc
            if limit is not None and shown >= limit:
                break
    except KeyboardInterrupt:
        pass
    except (OSError, ValueError) as exc:
        raise EtlstageError(f"tap: the connection to the pipeline broke: {exc}") from None
    finally:
        opened.stream.close()


@main.command("test")
@click.argument("test_files", nargs=-1, required=True, type=click.Path(dir_okay=False))
@click.option("--case", "only", default=None, help="Run only the case of this name.")
@click.option(
    "--workdir",
    default=None,
    type=click.Path(file_okay=False),
    help="Run the cases in folders here and keep them all (default: a temporary folder, kept for failed cases).",
)
def test_cmd(test_files: tuple[str, ...], only: str | None, workdir: str | None) -> None:
    """Run pipeline fixture tests: each case runs the whole pipeline (--once, real processes) in a
    fresh copy of its folder, from input files to expected outputs (docs/testing.md)."""
    import shutil
    import tempfile

    from etlstage.testing.pipeline import load_tests

    suites = [(f, load_tests(f)) for f in test_files]  # every file checked before any run
    cases = [c for _, found in suites for c in found if only in (None, c.name)]
    if not cases:
        raise ConfigError([f"no case named {only!r} in {', '.join(test_files)}"])
    if workdir is not None:
        os.makedirs(workdir, exist_ok=True)
    root = workdir or tempfile.mkdtemp(prefix="etlstage-test-")
    failed = 0
    for case in cases:
        result = case.run(root)
        click.echo(f"{'PASS' if result.passed else 'FAIL'}  {case.name} ({result.seconds:.1f}s)")
        if not result.passed:
            failed += 1
            click.echo("\n".join(f"  {line}" for line in result.report().splitlines()))
            click.echo(f"  (the case's folder: {result.folder})")
        elif workdir is None:
            shutil.rmtree(result.folder, ignore_errors=True)
    if workdir is None and not failed:
        shutil.rmtree(root, ignore_errors=True)
    click.echo(f"{len(cases)} case(s): {len(cases) - failed} passed, {failed} failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
