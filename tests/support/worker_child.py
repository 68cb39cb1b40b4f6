"""A stock worker as a real child process, driven by hand: the ``ETLSTAGE_*`` environment of
its scenario, a request written, its answer read to EOP (the Kinesis and Kafka worker tests).

    spawn = spawner("etlstage_workers.kinesis")   # a pytest fixture's body
    w = spawn([...args], state_dir)
    w.cycle()                                     # one window's messages
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


class WorkerChild:
    def __init__(
        self,
        module: str,
        args: list[str],
        state_dir: str,
        *,
        kind: str = "E",
        mode: str = "cyclic",
        stage: str = "stage",
        instance: int = 0,
        instances: int = 1,
        batch_size: int = 1000,
        extra_env: dict[str, str] | None = None,
    ) -> None:
        from etlstage.protocol.scenario import Scenario
        from etlstage.protocol.vocabulary import Mode, StageType

        scenario = Scenario(
            StageType(kind), Mode(mode), stage=stage, instance=instance, instances=instances, batch_size=batch_size
        )
        env = {**os.environ, **scenario.to_env(), "ETLSTAGE_STATE_DIR": state_dir}
        env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
        env.update(extra_env or {})
        Path(state_dir).mkdir(parents=True, exist_ok=True)
        self.stderr_path = Path(state_dir) / f"stderr-{time.monotonic_ns()}.log"
        self._stderr = open(self.stderr_path, "wb")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", module, *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            env=env,
        )

    def ask(self, payload: bytes, timeout: float = 60.0) -> list[bytes]:
        """Write ``payload`` (a request, or a batch and its EOB), read to the next EOP."""
        assert self.proc.stdin and self.proc.stdout
        self.proc.stdin.write(payload)
        self.proc.stdin.flush()
        buf = bytearray()
        deadline = time.monotonic() + timeout
        while not buf.endswith(b"\x00"):
            if time.monotonic() > deadline:
                raise TimeoutError(f"no EOP within {timeout} s; stderr:\n{self.stderr()}")
            chunk = os.read(self.proc.stdout.fileno(), 1 << 16)
            if not chunk:
                raise EOFError(f"worker exited (status {self.proc.poll()}) mid-cycle; stderr:\n{self.stderr()}")
            buf += chunk
        body = bytes(buf[:-1])
        assert b"\x00" not in body, "EOP inside a window"
        return body.split(b"\n")[:-1] if body else []

    def cycle(self, timeout: float = 60.0) -> list[bytes]:
        """One request of a cyclic extractor: the messages of that window."""
        return self.ask(b"\n", timeout)

    def load(self, messages: list[bytes], timeout: float = 60.0) -> None:
        """One batch to a loader, acknowledged with its EOP."""
        assert self.ask(b"".join(m + b"\n" for m in messages) + b"\x17", timeout) == []

    def read_all(self, timeout: float = 60.0) -> list[bytes]:
        """Plain mode: everything until exit."""
        out, _ = self.proc.communicate(timeout=timeout)
        self._stderr.close()
        assert self.proc.returncode == 0, f"exit {self.proc.returncode}; stderr:\n{self.stderr()}"
        return out.split(b"\n")[:-1] if out else []

    def close_stdin(self, timeout: float = 30.0) -> int:
        assert self.proc.stdin
        self.proc.stdin.close()
        code = self.proc.wait(timeout)
        self._stderr.close()
        return code

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)
        self._stderr.close()

    def stderr(self) -> str:
        if not self._stderr.closed:
            self._stderr.flush()
        return self.stderr_path.read_text(errors="replace")[-4000:]


def spawner(make: Callable[..., WorkerChild]) -> Iterator[Callable[..., WorkerChild]]:
    """The body of a ``spawn`` fixture: children made with ``make``; leftovers killed at the end."""
    started: list[WorkerChild] = []

    def spawn(*args: Any, **kwargs: Any) -> WorkerChild:
        w = make(*args, **kwargs)
        started.append(w)
        return w

    yield spawn
    for w in started:
        if w.proc.poll() is None:
            w.kill()
