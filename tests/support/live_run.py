"""A real `etlstage run --http 127.0.0.1:0` in the background, for tests that watch a run."""

from __future__ import annotations

import re
import signal
import subprocess
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

from tests.support.run_cli import ETLSTAGE

URL_LINE = re.compile(r"status page and metrics on (http://\S+/)")
SUMMARY_ROW = re.compile(r"^(\S+)\s+([ETL])\s+([\d,]+)\s+([\d,]+)\s", re.M)
RESTARTS_ROW = re.compile(r"^(\S+)\s+([ETL])\s+([\d,]+)\s+([\d,]+)\s+\S+\s+(\d+)\s+(\d+)\s*$", re.M)


def restarts_in_summary(stderr: str) -> dict[str, int]:
    """``stage -> restarts`` from a summary table (stage, type, in, out, rate, in flight, restarts)."""
    return {m[0]: int(m[5]) for m in RESTARTS_ROW.findall(stderr)}


class LiveRun:
    def __init__(self, cwd: Path, *args: str, timeout: float = 30.0) -> None:
        self.proc = subprocess.Popen(
            [*ETLSTAGE, "run", "stages.yaml", "--no-progress", "--http", "127.0.0.1:0", *args],
            cwd=cwd,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        deadline = time.monotonic() + timeout
        self.url = ""
        while not self.url:
            found = [m.group(1) for line in list(self.lines) if (m := URL_LINE.search(line))]
            if found:
                self.url = found[0]
            elif self.proc.poll() is not None or time.monotonic() > deadline:
                self.kill()
                raise AssertionError("no 'status page and metrics on' line:\n" + self.stderr)
            else:
                time.sleep(0.05)

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.lines.append(line)

    @property
    def stderr(self) -> str:
        return "".join(self.lines)

    def get(self, path: str) -> tuple[int, str, str]:
        """(HTTP status, Content-Type, body) of GET ``path``."""
        try:
            with urllib.request.urlopen(self.url + path.lstrip("/"), timeout=15) as r:
                return r.status, r.headers.get("Content-Type", ""), r.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.headers.get("Content-Type", ""), exc.read().decode()

    def stop(self, timeout: float = 60.0) -> int:
        """SIGTERM (a graceful stop); returns the exit status once the summary is written."""
        self.proc.send_signal(signal.SIGTERM)
        code = self.proc.wait(timeout=timeout)
        self._reader.join(timeout=10)
        return code

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=30)

    def summary(self) -> dict[str, tuple[int, int]]:
        """``stage -> (in, out)`` from the end-of-run summary table."""
        return {
            m[0]: (int(m[2].replace(",", "")), int(m[3].replace(",", ""))) for m in SUMMARY_ROW.findall(self.stderr)
        }

    def __enter__(self) -> LiveRun:
        return self

    def __exit__(self, *exc: object) -> None:
        self.kill()
