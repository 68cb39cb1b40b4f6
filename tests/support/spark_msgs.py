"""Messages and a protocol driver for the Spark loader tests."""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time

from etlstage.protocol.scenario import Scenario
from etlstage.protocol.vocabulary import Mode, StageType
from tests.support.worker_env import without_supervisor_vars

PY = sys.executable
WT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def rdss(i: int, code: str | None = None, body: object = None) -> bytes:
    header: dict = {
        "messageId": f"00000000-0000-4000-8000-{i:012d}",
        "messageClass": "Event",
        "messageType": "MetadataCreate" if i % 2 else "MetadataUpdate",
        "messageTimings": {"publishedTimestamp": "2024-05-01T12:00:00Z"},
        "messageSequence": {"sequence": "seq-1", "position": i, "total": 1},
        "version": "3.0.2",
        "generator": "tests",
    }
    if code:
        header["errorCode"] = code
        header["errorDescription"] = f"problem {code}"
    doc = {"messageHeader": header, "messageBody": body if body is not None else {"objectUuid": f"o-{i}", "n": i}}
    return json.dumps(doc, separators=(",", ":")).encode()


WRAPPED_NOT_JSON = (
    b'{"messageHeader":{"errorCode":"GENERR007","errorDescription":"not JSON"},'
    b'"messageBody":null,"rawPayload":"<xml/>"}'
)


def env_for(state_dir: str, instance: int = 0, **extra: str) -> dict[str, str]:
    env = without_supervisor_vars()
    scenario = Scenario(StageType.L, Mode.BATCH, 1000, stage="load", instance=instance)
    env.update(scenario.to_env())
    env.update(
        ETLSTAGE_STATE_DIR=state_dir,
        PYTHONPATH=WT,
        SPARK_LOCAL_IP="127.0.0.1",
    )
    env.update(extra)
    return env


class LoaderProc:
    """A real ``etlstage-spark-load`` subprocess, driven with protocol bytes (supervisor-driven batches)."""

    def __init__(self, args: list[str], env: dict[str, str], stderr_path: str) -> None:
        self.stderr = open(stderr_path, "ab")
        self.proc = subprocess.Popen(
            [PY, "-m", "etlstage_workers.spark", *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.stderr,
            env=env,
            start_new_session=True,
        )

    def send(self, messages: list[bytes]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(b"".join(m + b"\n" for m in messages) + b"\x17")
        self.proc.stdin.flush()

    def read_eop(self, timeout: float) -> bool:
        """True on EOP; False if the process died (no EOP) first."""
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            ready, _, _ = select.select([fd], [], [], 0.5)
            if ready:
                data = os.read(fd, 1)
                if not data:
                    return False
                assert data == b"\x00", f"unexpected protocol byte {data!r}"
                return True
        raise TimeoutError(f"no EOP within {timeout}s")

    def load(self, messages: list[bytes], timeout: float = 180) -> None:
        self.send(messages)
        assert self.read_eop(timeout), "the loader died instead of acknowledging the batch"

    def close(self, timeout: float = 60) -> int:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        code = self.proc.wait(timeout)
        self.stderr.close()
        return code

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(30)
        self.stderr.close()
