"""`etlstage run --metrics-file` and `--pushgateway`: a short run's metrics outlive it."""

from __future__ import annotations

import http.server
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest
from prometheus_client.parser import text_string_to_metric_families

N = 2_500
STAGES = """
    name: shortrun
    stages:
      - {name: src, type: E, mode: plain, command: ["{PY}", "{TW}", count, "%d"]}
      - {name: shout, type: T, mode: batch, batch_size: 50, command: ["{PY}", "{TW}", upper]}
      - {name: sink, type: L, mode: batch, batch_size: 100, command: ["{PY}", "{TW}", append, out.txt]}
"""


def samples(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
    }


def stage_value(found: dict[tuple[str, frozenset[tuple[str, str]]], float], name: str, stage: str) -> float:
    (v,) = [v for (n, ls), v in found.items() if n == name and ("stage", stage) in ls]
    return v


def test_a_once_run_leaves_its_final_counts_in_the_metrics_file(pdir):
    pdir.write(STAGES % N)
    out = pdir.path / "metrics" / "shortrun.prom"
    out.parent.mkdir()
    r = pdir.run("--once", "--metrics-file", str(out))
    assert r.code == 0, r.stderr
    loaded = len(pdir.lines("out.txt"))
    assert loaded == N
    found = samples(out.read_text())
    # the sink's own lines, not the counters compared with themselves
    assert stage_value(found, "etlstage_stage_input_messages_total", "sink") == loaded
    assert stage_value(found, "etlstage_stage_output_messages_total", "src") == loaded
    assert stage_value(found, "etlstage_stage_output_messages_total", "shout") == loaded
    assert not [n for n, _ in found if n.startswith("process_")]  # a gone process's figures are left out
    assert found[("etlstage_run_exit_code", frozenset({("pipeline", "shortrun")}))] == 0
    assert not list(out.parent.glob("*.tmp*")), "the temporary file of the atomic write stays behind"


def test_a_failed_run_exports_its_exit_status_to_the_file_and_the_gateway(pdir, gateway):
    pdir.write(
        """
        name: shortrun
        stages:
          - {name: src, type: E, mode: plain, command: ["{PY}", "{TW}", count, "10"]}
          - {name: sink, type: L, mode: batch, restart: {max_restarts: 0},
             command: ["{PY}", "-c", "import sys; sys.exit(3)"]}
        """
    )
    out = pdir.path / "shortrun.prom"
    r = pdir.run("--once", "--metrics-file", str(out), "--pushgateway", gateway.url)
    assert r.code == 1, r.stderr
    assert gateway.pushed.wait(10)
    for text in (out.read_text(), gateway.pushes[0][2].decode()):
        found = samples(text)
        assert found[("etlstage_run_exit_code", frozenset({("pipeline", "shortrun")}))] == 1
        ((when,),) = [[v] for (n, _), v in found.items() if n == "etlstage_run_end_time_seconds"]
        assert abs(when - time.time()) < 60
        # the figures of the run up to its failure are there too (their values depend on timing)
        assert stage_value(found, "etlstage_stage_restarts_total", "sink") >= 0


def test_a_metrics_file_in_a_missing_folder_is_refused_before_the_run(pdir):
    pdir.write(STAGES % 10)
    r = pdir.run("--once", "--metrics-file", str(pdir.path / "nowhere" / "m.prom"))
    assert r.code == 2, r.stderr
    assert "--metrics-file" in r.stderr and "nowhere" in r.stderr and "Traceback" not in r.stderr
    assert not pdir.lines("out.txt")


@pytest.mark.parametrize("url", ["ftp://gw:9091", "http://", "gw:port", ":9091"])
def test_a_pushgateway_that_is_no_url_is_refused_before_the_run(pdir, url):
    pdir.write(STAGES % 10)
    r = pdir.run("--once", "--pushgateway", url)
    assert r.code == 2, r.stderr
    assert f"--pushgateway {url!r}" in r.stderr and "Traceback" not in r.stderr
    assert not pdir.lines("out.txt")


@dataclass
class Gateway:
    url: str
    pushes: list[tuple[str, str, bytes]] = field(default_factory=list)
    auth: list[str | None] = field(default_factory=list)  # each push's Authorization header
    pushed: threading.Event = field(default_factory=threading.Event)


@pytest.fixture
def gateway() -> Iterator[Gateway]:
    """A tiny HTTP server standing in for a Pushgateway: records each push."""
    gw = Gateway("")

    class Handler(http.server.BaseHTTPRequestHandler):
        def _push(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            gw.pushes.append((self.command, self.path, body))
            gw.auth.append(self.headers.get("Authorization"))
            self.send_response(200)
            self.end_headers()
            gw.pushed.set()

        do_PUT = do_POST = _push

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    gw.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield gw
    server.shutdown()
    server.server_close()


def test_the_end_of_a_run_pushes_its_metrics_to_the_pushgateway(pdir, gateway):
    pdir.write(STAGES % N)
    r = pdir.run("--once", "--pushgateway", gateway.url)
    assert r.code == 0, r.stderr
    assert gateway.pushed.wait(10)
    ((method, path, body),) = gateway.pushes
    assert method == "PUT"  # replaces the group's previous run
    assert path.startswith("/metrics/job/shortrun/host/"), path
    found = samples(body.decode())
    assert stage_value(found, "etlstage_stage_input_messages_total", "sink") == len(pdir.lines("out.txt")) == N


def test_a_failed_push_is_a_warning_not_a_failed_run(pdir):
    import socket

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    pdir.write(STAGES % 100)
    r = pdir.run("--once", "--pushgateway", f"http://127.0.0.1:{port}")
    assert r.code == 0, r.stderr
    assert "metrics not pushed" in r.stderr and "WARNING" in r.stderr, r.stderr
    assert len(pdir.lines("out.txt")) == 100


CYCLIC = """
    name: shortrun
    stages:
      - {name: src, type: E, mode: cyclic, poll_interval: 0.2, command: ["{PY}", "{TW}", count, "1000000", "100"]}
      - {name: sink, type: L, mode: batch, batch_size: 100, command: ["{PY}", "{TW}", append, out.txt]}
"""


@pytest.mark.slow
def test_the_metrics_file_is_written_during_a_run_with_the_names_metrics_serves(pdir):
    from tests.support.live_run import LiveRun
    from tests.support.waiting import wait_for

    pdir.write(CYCLIC)
    out = pdir.path / "shortrun.prom"
    with LiveRun(pdir.path, "--metrics-file", str(out)) as run:
        during = wait_for(lambda: out.exists() and out.read_text(), 20, "the metrics file during the run")
        assert run.proc.poll() is None  # written while running, not only at the end
        _, _, served = run.get("/metrics")
        assert run.stop() == 0, run.stderr
    # one collector, two renderings: the file has every name /metrics has, but the process's own
    names = {n for n, _ in samples(during)}
    assert names == {n for n, _ in samples(served) if not n.startswith(("process_", "python_"))}
    # the last write is the final figures (not a periodic write's)
    assert stage_value(samples(out.read_text()), "etlstage_stage_input_messages_total", "sink") == len(
        pdir.lines("out.txt")
    )


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_spark_once_run_writes_the_metrics_file_and_pushes(pdir, gateway):
    pdir.write(STAGES % N)
    out = pdir.path / "shortrun.prom"
    r = pdir.run(
        "--once",
        "--engine",
        "spark",
        "--master",
        "local[2]",
        "--metrics-file",
        str(out),
        "--pushgateway",
        gateway.url,
        timeout=240,
    )
    assert r.code == 0, r.stderr
    loaded = len(pdir.lines("out.txt"))
    assert loaded == N
    assert stage_value(samples(out.read_text()), "etlstage_stage_input_messages_total", "sink") == loaded
    assert gateway.pushed.wait(10)
    ((method, path, body),) = gateway.pushes
    assert method == "PUT" and path.startswith("/metrics/job/shortrun/host/"), path
    assert stage_value(samples(body.decode()), "etlstage_stage_input_messages_total", "sink") == loaded


def test_a_periodic_write_late_for_the_end_does_not_replace_the_final_file(tmp_path):
    """The thread's write waits on a busy event loop while the run ends: once the final file
    (with the exit status) is written, that late write is dropped."""
    from etlstage.observe.export import RunExport, Targets
    from etlstage.observe.live import Snapshot

    def snap(n: int) -> Snapshot:
        stage = {
            "in": n, "out": n, "bytes_in": 0, "bytes_out": 0, "jobs": 0, "restarts": 0, "deadletters": 0,
            "failures": {}, "latency": None, "reports": {},
        }  # fmt: skip
        live = {"pipeline": "p", "time": 2.0, "elapsed": 1.0, "windows_in_flight": 0, "stages": {"sink": stage}}
        return Snapshot(live, {})  # type: ignore[arg-type]

    out = tmp_path / "p.prom"
    asked, release = threading.Event(), threading.Event()

    def during() -> Snapshot:  # the event loop, busy until the run has ended
        asked.set()
        release.wait(10)
        return snap(5)

    export = RunExport(Targets(str(out)), "p", interval=0.01)
    stop = export.attach(during, lambda: snap(7))
    assert asked.wait(10)
    stop()
    export.end(0)
    release.set()
    export._thread.join(10)
    found = samples(out.read_text())
    assert stage_value(found, "etlstage_stage_input_messages_total", "sink") == 7
    assert ("etlstage_run_exit_code", frozenset({("pipeline", "p")})) in found


def _basic(user: str, password: str) -> str:
    import base64

    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


def test_pushgateway_credentials_from_the_environment_are_sent_and_never_printed(pdir, gateway):
    pdir.write(STAGES % 10)
    env = {"ETLSTAGE_PUSHGATEWAY_USERNAME": "bob", "ETLSTAGE_PUSHGATEWAY_PASSWORD": "gwPW555"}
    r = pdir.etlstage("run", "stages.yaml", "--no-progress", "--once", "--pushgateway", gateway.url, env=env)
    assert r.code == 0 and gateway.pushed.wait(10), r.stderr
    assert gateway.auth == [_basic("bob", "gwPW555")]
    assert "gwPW555" not in r.stderr and "credentials in the URL" not in r.stderr, r.stderr


def test_pushgateway_credentials_in_the_url_are_sent_with_a_warning_and_never_printed(pdir, gateway):
    pdir.write(STAGES % 10)
    url = gateway.url.replace("http://", "http://bob:gw%40PW555@")
    r = pdir.run("--once", "--pushgateway", url)
    assert r.code == 0 and gateway.pushed.wait(10), r.stderr
    assert gateway.auth == [_basic("bob", "gw@PW555")]
    assert "credentials in the URL are visible" in r.stderr and "http://***@127.0.0.1" in r.stderr, r.stderr
    assert "PW555" not in r.stderr and "bob" not in r.stderr, r.stderr


@pytest.mark.slow
def test_a_failed_push_never_prints_the_urls_credentials(pdir):
    import socket

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    pdir.write(STAGES % 10)
    r = pdir.run("--once", "--pushgateway", f"http://bob:gwPW555@127.0.0.1:{port}")
    assert r.code == 0 and "metrics not pushed" in r.stderr, r.stderr
    assert "gwPW555" not in r.stderr and "bob" not in r.stderr, r.stderr
    r = pdir.run("--once", "--pushgateway", "ftp://bob:gwPW555@gw:9091")
    assert r.code == 2 and "--pushgateway 'ftp://***@gw:9091'" in r.stderr, r.stderr
    assert "gwPW555" not in r.stderr and "Traceback" not in r.stderr
