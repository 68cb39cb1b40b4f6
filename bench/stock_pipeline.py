"""Stock pipeline benchmark: Kinesis (emulator) -> RDSS -> Spark, end to end, against each
stage alone on the same input, for ~1 KB and ~4 KB valid RDSS messages.  Writes a table
and a plot (docs/stock-pipeline.png).

    python bench/stock_pipeline.py [--n1k 40000] [--n4k 10000]
    python bench/stock_pipeline.py --n1k 200000 --n4k 0 --alone rdss,spark --spark \
        --variant 'before: kinesis.--max-records-per-cycle=10000; spark.batch_size=5000'

``--variant LABEL: OVERRIDES`` adds a run of the pipeline with some of the stock settings
changed (``stage.key=value``: a stage key, its value YAML; ``stage.--flag=value``: a flag's
value in the stage's command), measured in the same run as the stock settings.

The stages are the stock stages.yaml's, as they are (settings, commands), with the
bench's emulator in place of the demo services and the output in a temporary directory.

Every run is a whole `etlstage run --once`, start-up included (the emulator's ~2 s, the
Spark session's ~10 s), the same way for the pipeline and for each stage alone:
  kinesis alone: emulator -> etlstage-kinesis -> a C loader that discards;
  rdss alone:    cat records -> etlstage-rdss -> a C loader that discards;
  spark alone:   cat rdss results -> etlstage-spark-load.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import psutil
import yaml

HERE = Path(__file__).parent
W = HERE / "workers"
PY = sys.executable
sys.path.insert(0, str(HERE.parent))

from etlstage_workers.rdss.demo import _Maker


def messages(n: int, large: bool, seed: int = 3) -> list[bytes]:
    maker = _Maker(seed)
    out = []
    for _ in range(n):
        if large:
            doc = maker.message(("MetadataCreate", "Command"))
            doc["messageBody"] = maker.research_object(3)
        else:
            doc = maker.message(("VocabularyPatch", "Command"))
            doc["messageBody"]["vocabularyTerms"] = sorted({maker.words(3) for _ in range(16)})
        out.append(json.dumps(doc, separators=(",", ":")).encode())
    return out


STOCK = HERE.parent / "stages.yaml"


def stock_stages() -> dict[str, dict[str, Any]]:
    """The stock pipeline's stages as stages.yaml defines them (output and state in the bench's directory)."""
    doc = yaml.safe_load(STOCK.read_text())
    stages = {st["name"]: dict(st) for st in doc["stages"]}
    spark = stages["spark"]
    command = list(spark["command"])
    command[command.index("--output") + 1] = "out"
    spark["command"] = command
    return stages


def stream_of(kinesis: dict[str, Any]) -> str:
    command = kinesis["command"]
    return str(command[command.index("--stream") + 1])


def emulator_service(stream: str) -> str:
    command = [PY, "-m", "etlstage_workers.kinesis.emulator", "--service", "--stream", stream, "--shards", "2",
               "--records", "records.jsonl"]  # fmt: skip
    return "services:\n  - " + json.dumps({"name": "emulator", "command": command}) + "\n"


def pipeline(*stages: dict[str, Any], services: str = "") -> str:
    """A stages.yaml text (JSON is YAML) of these stages."""
    return services + "stages:\n" + "".join(f"  - {json.dumps(st)}\n" for st in stages)


CORES = psutil.cpu_count() or 1
PEAK_RSS: dict[str, int] = {}  # the supervisor's peak RSS per run label, sampled every 0.1 s
CPU: dict[str, float] = {}  # CPU seconds of each run: the supervisor and every process under it, sampled
CPU_SECONDS: dict[str, float] = {}  # the same, not divided by the run's wall time
KEEP_LOGS: Path | None = None  # --keep-logs: each measured run's log is copied there
EMULATOR_CPU: dict[str, float] = {}  # of which the Kinesis emulator (AWS's side in production)


def run(work: Path, yaml_text: str, label: str = "", flags: tuple[str, ...] = ()) -> float:
    shutil.rmtree(work / ".etlstage", ignore_errors=True)
    shutil.rmtree(work / "out", ignore_errors=True)
    (work / "stages.yaml").write_text(yaml_text)
    t0 = time.perf_counter()
    with open(work / "run.log", "w+") as log:
        proc = subprocess.Popen(
            [PY, "-m", "etlstage.cli", "run", *flags, "stages.yaml", "--once", "--no-progress"],
            cwd=work,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        peak = [0]
        cpu: dict[int, float] = {}  # pid -> its CPU seconds when last seen (a process's last 0.1 s is lost)
        seen: set[int] = set()
        emulators: set[int] = set()
        done = threading.Event()

        def sample() -> None:
            supervisor = psutil.Process(proc.pid)
            while not done.wait(0.1):
                with contextlib.suppress(psutil.Error):
                    peak[0] = max(peak[0], supervisor.memory_info().rss)
                    for p in [supervisor, *supervisor.children(recursive=True)]:
                        with contextlib.suppress(psutil.Error):
                            times = p.cpu_times()
                            cpu[p.pid] = times.user + times.system
                            if p.pid not in seen:
                                seen.add(p.pid)
                                if any("emulator" in arg for arg in p.cmdline()):
                                    emulators.add(p.pid)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        proc.wait()
        seconds = time.perf_counter() - t0
        done.set()
        sampler.join()
        if label and KEEP_LOGS is not None:  # a failed run's too: the log says why
            KEEP_LOGS.mkdir(parents=True, exist_ok=True)
            shutil.copy(work / "run.log", KEEP_LOGS / (re.sub(r"[^\w.-]+", "_", label) + ".log"))
        if proc.returncode != 0:
            log.seek(0)
            raise SystemExit(f"run failed:\n{log.read()[-3000:]}")
    if label:
        PEAK_RSS[label] = max(PEAK_RSS.get(label, 0), peak[0])
        CPU[label] = CPU_SECONDS[label] = sum(cpu.values())
        EMULATOR_CPU[label] = sum(cpu[pid] for pid in emulators if pid in cpu)
    return seconds


def size_label(n: int, large: bool) -> str:
    return f"{n:,} x {'4.5' if large else '1'} KB"


def with_overrides(stages: dict[str, dict[str, Any]], overrides: str) -> dict[str, dict[str, Any]]:
    """``stages`` with ``overrides`` applied: ``stage.key=value`` (YAML) or ``stage.--flag=value``,
    separated by ``;``."""
    out = {name: {**st, "command": list(st["command"])} for name, st in stages.items()}
    for item in filter(None, (part.strip() for part in overrides.split(";"))):
        target, _, value = item.partition("=")
        name, _, key = target.strip().partition(".")
        if name not in out or not key or not value:
            raise SystemExit(
                f"--variant: {item!r}: expected stage.key=value or stage.--flag=value (stages: {', '.join(out)})"
            )
        if key.startswith("--"):
            command = out[name]["command"]
            if key in command:
                command[command.index(key) + 1] = value.strip()
            else:
                command += [key, value.strip()]
        else:
            out[name][key] = yaml.safe_load(value)
    return out


def measure(
    work: Path,
    n: int,
    large: bool,
    engines: dict[str, tuple[str, ...]],
    variants: dict[str, str] | None = None,
    alone: tuple[str, ...] = ("kinesis", "rdss", "spark"),
) -> dict[str, float]:
    records = messages(n, large)
    (work / "records.jsonl").write_bytes(b"\n".join(records) + b"\n")
    loader = work / "discard"
    subprocess.run(["cc", "-O2", "-o", str(loader), str(W / "null_loader.c")], check=True)
    stages = stock_stages()
    kinesis, rdss, spark = stages["kinesis"], stages["rdss"], stages["spark"]
    service = emulator_service(stream_of(kinesis))
    discard = {"name": "discard", "type": "L", "mode": "batch", "batch_size": 500, "command": [str(loader)]}
    cat = {"name": "cat", "type": "E", "command": ["cat", "records.jsonl"]}
    keep = {"name": "keep", "type": "L", "mode": "batch", "batch_size": 500,
            "command": [PY, str(W / "keep.py"), "results.jsonl"]}  # fmt: skip
    times = {}
    size = size_label(n, large)
    if "kinesis" in alone:
        times["kinesis alone"] = run(work, pipeline(kinesis, discard, services=service), f"{size}: kinesis alone")
    if "rdss" in alone:
        times["rdss alone"] = run(work, pipeline(cat, rdss, discard), f"{size}: rdss alone")
    if "spark" in alone:
        # the results of rdss, as the spark stage receives them
        (work / "results.jsonl").unlink(missing_ok=True)
        run(work, pipeline(cat, rdss, keep))
        times["spark alone"] = run(
            work, pipeline({**cat, "command": ["cat", "results.jsonl"]}, spark), f"{size}: spark alone"
        )
    for variant, overrides in {"": "", **(variants or {})}.items():
        changed = with_overrides(stages, overrides)
        stock = pipeline(changed["kinesis"], changed["rdss"], changed["spark"], services=service)
        suffix = f" ({variant})" if variant else ""
        times[f"pipeline{suffix}"] = run(work, stock, f"{size}: pipeline{suffix}")
        for name, flags in engines.items():  # the same pipeline file on the Spark engine
            times[f"{name}{suffix}"] = run(work, stock, f"{size}: {name}{suffix}", flags)
    for name, seconds in times.items():
        CPU[f"{size}: {name}"] /= seconds  # cores' worth busy on average
    return {k: n / v for k, v in times.items()}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n1k", type=int, default=40000)
    ap.add_argument("--n4k", type=int, default=10000)
    ap.add_argument("--plot", default=str(HERE.parent / "docs" / "stock-pipeline.png"))
    ap.add_argument(
        "--variant",
        action="append",
        default=[],
        metavar="LABEL: OVERRIDES",
        help="also the pipeline with settings changed, e.g. 'big: spark.batch_size=25000; kinesis.--max-records-per-cycle=50000'",
    )
    ap.add_argument("--keep-logs", metavar="DIR", help="copy each measured run's log (supervisor and workers) here")
    ap.add_argument("--alone", default="kinesis,rdss,spark", help="the stages measured alone (comma-separated)")
    ap.add_argument("--spark", action="store_true", help="also the pipeline on the Spark engine (local[2])")
    ap.add_argument("--cluster", action="store_true", help="...and on a loopback standalone cluster of two workers")
    a = ap.parse_args()
    engines: dict[str, tuple[str, ...]] = {}
    if a.spark or a.cluster:
        engines["spark engine, local[2]"] = ("--engine", "spark", "--master", "local[2]")
    with contextlib.ExitStack() as stack:
        if a.cluster:
            sys.path.insert(0, str(HERE.parent))
            from tests.support.spark_cluster import standalone_cluster

            cluster = Path(tempfile.mkdtemp(prefix="etlstage-bench-cluster-"))
            master = stack.enter_context(standalone_cluster(cluster, workers=2, memory="2g"))
            engines["spark engine, 2-worker cluster"] = ("--engine", "spark", "--master", master)
        report(a, engines)


def report(a: argparse.Namespace, engines: dict[str, tuple[str, ...]]) -> None:
    work = Path(tempfile.mkdtemp(prefix="etlstage-stock-bench-"))
    results = {}
    ceilings: dict[str, float] = {}
    global KEEP_LOGS
    KEEP_LOGS = Path(a.keep_logs) if a.keep_logs else None
    variants = dict(_variant(v) for v in a.variant)
    alone_stages = tuple(filter(None, a.alone.split(",")))
    for label, n, large in (("~1 KB", a.n1k, False), ("~4 KB", a.n4k, True)):
        if not n:
            continue
        size = sum(map(len, messages(50, large))) / 50
        rates = measure(work, n, large, engines, variants, alone_stages)
        results[f"{label} ({size / 1000:.1f} KB, {n:,} messages)"] = rates
        # The pipeline runs the three stages' work on the same cores at once: it cannot beat
        # n / (CPU seconds of the stages alone / cores), however well they overlap.
        if len(alone_stages) == 3:  # every stage's CPU seconds known
            alone = sum(CPU_SECONDS[f"{size_label(n, large)}: {k}"] for k in rates if k.endswith("alone"))
            ceilings[f"{label} ({size / 1000:.1f} KB, {n:,} messages)"] = n * CORES / alone
    print(f"{'input':<32} {'stage':<14} {'records/s':>10}")
    for label, rates in results.items():
        slowest = min(v for k, v in rates.items() if k.endswith("alone"))
        for k, v in rates.items():
            print(f"{label:<32} {k:<14} {v:>10,.0f}")
        for k, v in rates.items():
            if not k.endswith("alone"):
                print(f"{label:<32} {k + ' / slowest stage alone':<14} {v / slowest:>10.0%}")
        ceiling = ceilings.get(label)
        if ceiling is not None:
            print(f"{label:<32} {'CPU ceiling (%d cores)' % CORES:<14} {ceiling:>10,.0f}")
            print(f"{label:<32} {'ceiling / slowest stage':<14} {ceiling / slowest:>10.0%}")
            print(f"{label:<32} {'pipeline / ceiling':<14} {rates['pipeline'] / ceiling:>10.0%}")
        for name in engines:
            print(f"{label:<32} {name + ' / supervisor':<14} {rates[name] / rates['pipeline']:>10.0%}")
    print(f"\nCPU (cores busy on average: CPU seconds of the run's processes / wall seconds; {CORES} cores)")
    for label, cores in CPU.items():
        emulator = EMULATOR_CPU[label] / CPU_SECONDS[label] if CPU_SECONDS[label] else 0.0
        print(f"  {label:<36} {cores:5.2f}   ({CPU_SECONDS[label]:5.1f} CPU-s, emulator {emulator:.0%})")
    for label, peak in PEAK_RSS.items():
        if ": pipeline" in label:
            print(f"supervisor peak RSS, {label}: {peak / 2**20:.0f} MiB")
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib not installed: no plot")
        return
    fig, axes = plt.subplots(1, len(results), figsize=(10, 4), sharey=False, squeeze=False)
    for ax, (label, rates) in zip(axes[0], results.items(), strict=True):
        names = list(rates)
        ax.bar(names, [rates[k] for k in names], color=["#7a9", "#79a", "#a97", "#c55", "#e85", "#f4a"][: len(names)])
        ax.set_title(label, fontsize=9)
        ax.set_ylabel("records/s (whole run, start-up included)")
        ax.tick_params(axis="x", labelrotation=20, labelsize=8)
    fig.suptitle("etlstage stock pipeline: each stage alone vs the pipeline")
    fig.tight_layout()
    fig.savefig(a.plot, dpi=110)
    print(f"plot: {a.plot}")
    shutil.rmtree(work, ignore_errors=True)


def _variant(text: str) -> tuple[str, str]:
    label, sep, overrides = text.partition(":")
    if not sep or not label.strip():
        raise SystemExit(f"--variant {text!r}: expected 'LABEL: stage.key=value; ...'")
    return label.strip(), overrides


if __name__ == "__main__":
    main()
