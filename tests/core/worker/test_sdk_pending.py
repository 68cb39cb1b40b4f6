"""Loaders that finish batches in the background: ``load`` returns a Future.

The SDK reads and loads the next batch meanwhile, acknowledges strictly in request
order, never before a batch's future completes, and stops on a failed one.
"""

from __future__ import annotations

import io
import os
import select
import threading
from concurrent.futures import Future, ThreadPoolExecutor

import pytest

from etlstage.protocol import Markers, Scenario
from etlstage.testing import StageHarness
from etlstage.worker import Loader, serve

M = Markers(eom=ord("|"), eop=ord("#"), eob=ord("~"), bnc=ord("^"))


class GatedLoader(Loader):
    """Batch ``i`` completes when ``gates[i]`` is set; ``loaded`` holds the batches ``load`` saw."""

    def __init__(self, gated: set[int], fail: set[int] = frozenset()) -> None:  # type: ignore[assignment]
        self.gates = {i: threading.Event() for i in gated}
        self.fail = fail
        self.loaded: list[list[bytes]] = []
        self.called = threading.Condition()
        self.pool = ThreadPoolExecutor(max_workers=4)

    def load(self, messages: list[bytes]) -> Future[object]:
        index = len(self.loaded)
        with self.called:
            self.loaded.append(messages)
            self.called.notify_all()
        return self.pool.submit(self._finish, index)

    def _finish(self, index: int) -> None:
        gate = self.gates.get(index)
        if gate is not None:
            gate.wait(10)
        if index in self.fail:
            raise OSError(f"disk full while writing batch {index}")

    def wait_loaded(self, n: int) -> None:
        with self.called:
            assert self.called.wait_for(lambda: len(self.loaded) >= n, timeout=10), self.loaded


class Worker:
    """``serve`` in a thread over OS pipes, as the supervisor sees a worker process."""

    def __init__(self, loader: Loader, scenario: Scenario) -> None:
        in_r, self.in_w = os.pipe()
        self.out_r, out_w = os.pipe()
        self.error: BaseException | None = None
        stdin, stdout = os.fdopen(in_r, "rb", buffering=0), os.fdopen(out_w, "wb", buffering=0)

        def run() -> None:
            try:
                serve(loader, stdin=stdin, stdout=stdout, scenario=scenario)
            except BaseException as exc:
                self.error = exc
            finally:
                stdin.close()
                stdout.close()

        self.thread = threading.Thread(target=run, daemon=True)
        self.thread.start()

    def send(self, data: bytes) -> None:
        os.write(self.in_w, data)

    def replies(self, n: int, timeout: float = 10) -> bytes:
        got = b""
        while len(got) < n:
            ready, _, _ = select.select([self.out_r], [], [], timeout)
            assert ready, f"only {got!r} after {timeout}s"
            chunk = os.read(self.out_r, n - len(got))
            assert chunk, f"stdout closed after {got!r}"
            got += chunk
        return got

    def silent(self, seconds: float = 0.3) -> bool:
        return not select.select([self.out_r], [], [], seconds)[0]

    def close(self) -> None:
        os.close(self.in_w)
        self.thread.join(10)
        os.close(self.out_r)


def batch_scenario(**kw: object) -> Scenario:
    return Scenario(type="L", mode="batch", batch_size=100, markers=M, **kw)  # type: ignore[arg-type]


def test_the_next_batch_is_loaded_while_the_previous_finishes_and_acks_keep_request_order():
    loader = GatedLoader(gated={0})
    w = Worker(loader, batch_scenario())
    w.send(b"a|b|~c|~")
    loader.wait_loaded(2)  # batch 1 reached load() while batch 0 is unfinished
    assert w.silent(), "batch 1 finished first, but its EOP must wait for batch 0's"
    loader.gates[0].set()
    assert w.replies(2) == b"##"
    w.close()
    assert w.error is None
    assert loader.loaded == [[b"a", b"b"], [b"c"]]


def test_at_most_max_pending_batches_wait_in_the_background():
    loader = GatedLoader(gated={0, 1})
    loader.max_pending = 1
    w = Worker(loader, batch_scenario())
    w.send(b"a|~b|~c|~")
    loader.wait_loaded(2)
    assert w.silent() and len(loader.loaded) == 2, "batch 2 must wait until batch 0 is done"
    loader.gates[0].set()
    assert w.replies(1) == b"#"
    loader.wait_loaded(3)
    assert w.silent(), "batch 1's EOP came before its future completed"
    loader.gates[1].set()
    assert w.replies(2) == b"##"
    w.close()
    assert w.error is None


def test_a_failed_batch_stops_the_worker_unacknowledged_after_the_earlier_acks():
    loader = GatedLoader(gated=set(), fail={1})
    w = Worker(loader, batch_scenario())
    w.send(b"a|~b|~c|~")
    w.thread.join(10)
    assert isinstance(w.error, OSError) and "batch 1" in str(w.error)
    assert os.read(w.out_r, 10) == b"#", "only batch 0 is acknowledged"
    os.close(w.in_w)
    os.close(w.out_r)


def test_worker_driven_bnc_waits_for_the_pending_eop_before_it():
    loader = GatedLoader(gated={0})
    w = Worker(loader, Scenario(type="L", mode="batch", batch_size=2, batch_driver="worker", markers=M))
    w.send(b"a|b|c|")
    assert w.replies(1) == b"^"
    loader.wait_loaded(1)
    assert w.silent(), "the BNC for c must not overtake the EOP for [a, b]"
    loader.gates[0].set()
    assert w.replies(2) == b"#^"
    w.close()
    assert w.error is None


def test_end_of_input_waits_for_pending_batches_then_acknowledges_them():
    loader = GatedLoader(gated={0})
    w = Worker(loader, batch_scenario())
    w.send(b"a|~")
    loader.wait_loaded(1)
    os.close(w.in_w)
    assert w.silent(), "the EOP came before the batch's future completed"
    assert w.thread.is_alive(), "the worker must not end with a batch unfinished"
    loader.gates[0].set()
    w.thread.join(10)
    assert w.error is None
    assert os.read(w.out_r, 10) == b"#"
    os.close(w.out_r)


@pytest.mark.parametrize("mode, driver", [("batch", "supervisor"), ("batch", "worker"), ("single", "supervisor")])
def test_every_mode_through_the_supervisor_driver(tmp_path, mode, driver):
    loaded: list[bytes] = []
    pool = ThreadPoolExecutor(max_workers=1)

    def load(messages: list[bytes]) -> Future[object]:
        return pool.submit(loaded.extend, messages)

    inputs = [b"m%d" % i for i in range(500)]
    StageHarness(str(tmp_path)).run(load, type="L", mode=mode, batch_driver=driver, batch_size=7, inputs=inputs)
    assert loaded == inputs


def test_a_stream_without_a_descriptor_waits_for_each_batch_in_turn():
    class Raw(io.RawIOBase):  # unbuffered, but no file descriptor to wait on
        def __init__(self, data: bytes) -> None:
            self.data = data

        def readable(self) -> bool:
            return True

        def readinto(self, buffer) -> int:
            n = min(len(buffer), len(self.data))
            buffer[:n], self.data = self.data[:n], self.data[n:]
            return n

    loader = GatedLoader(gated=set())
    out = io.BytesIO()
    serve(loader, stdin=Raw(b"a|~b|~"), stdout=out, scenario=batch_scenario())
    assert out.getvalue() == b"##" and loader.loaded == [[b"a"], [b"b"]]
