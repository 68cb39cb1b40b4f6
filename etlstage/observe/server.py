"""The HTTP endpoints of a running pipeline: ``/``, ``/api/status``, ``/metrics``.

A small WSGI application served by a thread (``wsgiref``, one thread per request), so
the event loop never parses HTTP.  Whatever a response needs is read from the pipeline
at most every half second, however many clients ask — under the supervisor on its
event loop (``call_soon_threadsafe``), under the Spark engine from the driver's
counters (:mod:`etlstage.spark.driver.live`): the pipeline pays nothing per message and little
per request.  No
authentication: it listens on loopback unless told otherwise (docs/operating.md).

Whatever a client does, the pipeline runs on: a connection gets ``REQUEST_SECONDS`` to
send its request and ``IDLE_SECONDS`` between reads, at most ``MAX_CONNECTIONS`` are
served at once (the next ones get a 503 and are closed at once), so the server never holds
more than that many descriptors; a request whose ``Host`` is not the address listened on
(DNS rebinding from a browser) gets a 421 unless ``ETLSTAGE_HTTP_HOSTS`` names it.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
import ipaddress
import logging
import os
import selectors
import socket
import socketserver
import sys
import threading
import time
from collections.abc import Callable, Iterable
from importlib import resources
from typing import TYPE_CHECKING, Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer

from etlstage.errors import ConfigError
from etlstage.observe.document import StatusDoc, encode
from etlstage.observe.live import Snapshot, live_state
from etlstage.observe.status import status_document

if TYPE_CHECKING:
    from etlstage.runtime.pipeline import Pipeline

log = logging.getLogger("etlstage.http")

PAGE_FILES = {"app.js": "text/javascript", "style.css": "text/css"}
StartResponse = Callable[[str, list[tuple[str, str]]], Any]


MAX_CONNECTIONS = 32  # served at once; each holds one descriptor and one thread
IDLE_SECONDS = 10.0  # the longest wait for a client's next bytes
REQUEST_SECONDS = 30.0  # the longest a connection lives, however slowly it trickles
HOSTS_ENV = "ETLSTAGE_HTTP_HOSTS"  # more names a request's Host may carry (comma-separated; * for any)
BUSY = b"HTTP/1.0 503 Service Unavailable\r\nContent-Type: text/plain\r\nConnection: close\r\n\r\nbusy\n"


class _Server(socketserver.ThreadingMixIn, WSGIServer):
    daemon_threads = True
    block_on_close = False  # a request waiting for the event loop must not hold up the end of the run
    allow_reuse_address = True

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.slots = threading.BoundedSemaphore(MAX_CONNECTIONS)
        super().__init__(*args, **kwargs)

    def handle_error(self, request: Any, client_address: Any) -> None:
        # a client that timed out or went away: not worth a traceback on stderr
        log.debug("http: connection from %s ended: %s", client_address, sys.exc_info()[1])

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self.slots.acquire(blocking=False):
            # over the cap: answered and closed here, no thread, no descriptor kept
            with contextlib.suppress(OSError):
                request.setblocking(False)
                request.send(BUSY)
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self.slots.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.slots.release()


class _Handler(WSGIRequestHandler):
    def setup(self) -> None:
        super().setup()
        self.connection.settimeout(IDLE_SECONDS)  # per read and write
        # a whole-connection deadline: a client sending a byte every few seconds is cut off too
        self._deadline = threading.Timer(REQUEST_SECONDS, self._cut)
        self._deadline.daemon = True
        self._deadline.start()

    def _cut(self) -> None:
        with contextlib.suppress(OSError):
            self.connection.shutdown(socket.SHUT_RDWR)

    def finish(self) -> None:
        self._deadline.cancel()
        with contextlib.suppress(OSError):
            super().finish()

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s %s", self.address_string(), format % args)


class Snapshots:
    """Snapshots shared by requests within ``max_age``: one is taken by ``take`` through ``call``
    (the supervisor runs it on its event loop; the Spark engine's counters are read in place)."""

    def __init__(
        self,
        take: Callable[[], Snapshot],
        call: Callable[[Callable[[], Snapshot]], Snapshot] | None = None,
        max_age: float = 0.5,
    ) -> None:
        self.take = take
        self.call = call or (lambda fn: fn())
        self.max_age = max_age
        self._lock = threading.Lock()
        self._last: tuple[float, Snapshot] | None = None

    def get(self) -> Snapshot:
        with self._lock:
            if self._last is not None and time.monotonic() - self._last[0] < self.max_age:
                return self._last[1]
            snap = self.call(self.take)
            self._last = (time.monotonic(), snap)
            return snap


def on_loop(loop: asyncio.AbstractEventLoop, timeout: float = 10.0) -> Callable[[Callable[[], Snapshot]], Snapshot]:
    """Run a snapshot function on ``loop`` (where the pipeline changes) and wait for its result."""

    def call(fn: Callable[[], Snapshot]) -> Snapshot:
        done: concurrent.futures.Future[Snapshot] = concurrent.futures.Future()

        def take() -> None:
            try:
                done.set_result(fn())
            except BaseException as exc:  # reported to the waiting request
                done.set_exception(exc)

        loop.call_soon_threadsafe(take)
        return done.result(timeout=timeout)

    return call


def pipeline_snapshot(pipeline: Pipeline) -> Snapshot:
    """The supervisor's live state and status document (on its event loop)."""
    live = live_state(pipeline)
    return Snapshot(live, status_document(pipeline.store, live))


class App:
    """The WSGI application: routes, the page's files, JSON, and prometheus_client's exposition."""

    def __init__(self, snapshots: Snapshots, hosts: frozenset[str] | None = None) -> None:
        self.snapshots = snapshots
        self.hosts = hosts  # the Host names (lower case, without port) accepted; None: any
        self._metrics: Callable[..., Iterable[bytes]] | None = None
        self._metrics_lock = threading.Lock()
        page = resources.files("etlstage.observe") / "page"
        self.files = {name: (page / name).read_bytes() for name in [*PAGE_FILES, "index.html"]}

    def __call__(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        method, path = environ.get("REQUEST_METHOD", "GET"), environ.get("PATH_INFO", "/")
        host = environ.get("HTTP_HOST")  # absent in HTTP/1.0: no browser (the rebinding threat) omits it
        if self.hosts is not None and host is not None and _host_name(host) not in self.hosts:
            return _reply(start_response, "421 Misdirected Request", b"unknown Host\n", "text/plain")
        if method not in ("GET", "HEAD"):
            return _reply(
                start_response, "405 Method Not Allowed", b"GET only\n", "text/plain", [("Allow", "GET, HEAD")]
            )
        try:
            if path == "/metrics":
                return self.metrics()(environ, start_response)
            if path == "/api/status":
                return _reply(start_response, "200 OK", _json(self.snapshots.get().status), "application/json")
            if path in ("/", "/index.html"):
                return _reply(start_response, "200 OK", self._page(), "text/html; charset=utf-8")
            name = path.removeprefix("/static/")
            if name in PAGE_FILES:
                return _reply(start_response, "200 OK", self.files[name], PAGE_FILES[name] + "; charset=utf-8")
        except (concurrent.futures.TimeoutError, RuntimeError) as exc:
            # the event loop is busy for 10 s or gone (the run is ending)
            return _reply(start_response, "503 Service Unavailable", f"not available: {exc}\n".encode(), "text/plain")
        return _reply(start_response, "404 Not Found", f"no page {path}\n".encode(), "text/plain")

    def metrics(self) -> Callable[..., Iterable[bytes]]:
        """prometheus_client's exposition app, made on the first scrape: a run nobody
        scrapes does not import the library (tens of milliseconds of start-up)."""
        with self._metrics_lock:
            if self._metrics is None:
                from prometheus_client import ProcessCollector, make_wsgi_app

                from etlstage.observe.metrics import registry as pipeline_registry

                registry = pipeline_registry(self.snapshots.get)
                ProcessCollector(registry=registry)  # the serving process's own CPU, memory and open files
                self._metrics = make_wsgi_app(registry)
            return self._metrics

    def _page(self) -> bytes:
        """index.html with the state inlined: the first paint needs no second request.
        Every ``<`` is escaped (JSON allows ``\\u003c``): no string a worker or stages.yaml
        chose (``</script>``, ``<!--``) can end or change the script element."""
        state = _json(self.snapshots.get().status).replace(b"<", b"\\u003c")
        return self.files["index.html"].replace(b"{{STATE}}", state)


def _json(doc: StatusDoc) -> bytes:
    return encode(doc).encode()


def _host_name(header: str) -> str:
    """``Host`` without its port, lower case: ``[::1]:80`` -> ``::1``, ``Example:80`` -> ``example``."""
    header = header.strip().lower()
    if header.startswith("["):
        return header[1:].partition("]")[0]
    return header.rpartition(":")[0] if header.count(":") == 1 else header


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def allowed_hosts(host: str) -> frozenset[str] | None:
    """The ``Host`` names a request to ``host`` may carry: its own address (and ``localhost``
    on loopback; the machine's names on a wildcard address), plus ``ETLSTAGE_HTTP_HOSTS``;
    None (any) when that says ``*``."""
    extra = {h.strip().lower() for h in os.environ.get(HOSTS_ENV, "").split(",") if h.strip()}
    if "*" in extra:
        return None
    names = {host.lower(), *extra}
    if _is_loopback(host):
        names |= {"localhost", "127.0.0.1", "::1"}
    elif host in ("0.0.0.0", "::", ""):
        names |= {"localhost", "127.0.0.1", "::1", socket.gethostname().lower(), socket.getfqdn().lower()}
        with contextlib.suppress(OSError):
            names |= {str(a[4][0]) for a in socket.getaddrinfo(socket.gethostname(), None)}
    return frozenset(names)


def _reply(
    start_response: StartResponse, status: str, body: bytes, ctype: str, extra: list[tuple[str, str]] | None = None
) -> list[bytes]:
    headers = [("Content-Type", ctype), ("Content-Length", str(len(body))), ("Cache-Control", "no-store")]
    start_response(status, headers + (extra or []))
    return [body]


class ObserveServer:
    """Serves :class:`App` for one pipeline run from a daemon thread."""

    def __init__(self, snapshots: Snapshots, host: str, port: int) -> None:
        server_class = type("Server", (_Server,), {"address_family": _family(host)})
        try:
            self.httpd: WSGIServer = server_class((host, port), _Handler)
        except OSError as exc:
            raise ConfigError([f"http: cannot listen on {_url(host, port)}: {exc.strerror or exc}"]) from None
        self.httpd.set_app(App(snapshots, allowed_hosts(host)))
        self.port = self.httpd.server_address[1]
        self.url = _url(host, self.port)
        self.exposed = not _is_loopback(host)
        self._wake_r, self._wake_w = socket.socketpair()
        self._thread = threading.Thread(target=self._serve, name="etlstage-http", daemon=True)

    def start(self) -> None:
        self._thread.start()
        log.info("status page and metrics on %s (no authentication: see docs/operating.md)", self.url)
        if self.exposed:
            log.warning(
                "http: listening on %s, not loopback: anyone who reaches the port reads the status "
                "(no authentication, no TLS); keep it on 127.0.0.1 behind a proxy with authentication "
                "(docs/operating.md)",
                self.url,
            )

    def _serve(self) -> None:
        # Like serve_forever, but woken at once by stop() instead of polling every half second
        # (which would add up to that much to the end of every run).
        with selectors.DefaultSelector() as sel:
            sel.register(self.httpd.socket, selectors.EVENT_READ)
            sel.register(self._wake_r, selectors.EVENT_READ)
            while True:
                for key, _ in sel.select():
                    if key.fileobj is self._wake_r:
                        return
                    self.httpd.handle_request()  # readable: accepts at once, the request gets a thread

    def stop(self) -> None:
        self._wake_w.send(b"x")
        self._thread.join(timeout=5.0)
        self.httpd.server_close()
        self._wake_r.close()
        self._wake_w.close()


def _family(host: str) -> socket.AddressFamily:
    return socket.AF_INET6 if ":" in host else socket.AF_INET


def _url(host: str, port: int) -> str:
    return f"http://[{host}]:{port}/" if ":" in host else f"http://{host}:{port}/"


def serve(pipeline: Pipeline, address: tuple[str, int]) -> Callable[[], None]:
    """Start the endpoints for ``pipeline`` on ``address`` (from its event loop); returns the
    function that stops them."""
    loop = asyncio.get_running_loop()
    return serve_snapshots(Snapshots(functools.partial(pipeline_snapshot, pipeline), on_loop(loop)), address)


def serve_snapshots(snapshots: Snapshots, address: tuple[str, int]) -> Callable[[], None]:
    """Start the endpoints over any source of snapshots (the Spark engine's driver uses this)."""
    server = ObserveServer(snapshots, *address)
    server.start()
    return server.stop
