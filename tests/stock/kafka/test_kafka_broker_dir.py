"""``etlstage-kafka-broker --dir``: a folder that does not exist yet is made (0700, with its
parents); one that cannot be is refused with exit 2 naming it, never a traceback."""

from __future__ import annotations

import stat
import subprocess
import sys
from pathlib import Path

import pytest
from etlstage_workers.kafka import broker as broker_module
from etlstage_workers.kafka.broker import Broker


def test_a_new_folder_is_made_before_the_config_is_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ran: list[str] = []
    monkeypatch.setattr(broker_module, "fetch_named", lambda name: [])
    monkeypatch.setattr(Broker, "_java", lambda self, main, *args, **kw: ran.append(main))
    monkeypatch.setattr(Broker, "_launch", lambda self, config: ran.append(str(config)))
    new = tmp_path / "new" / "deeper"
    Broker(str(new)).start()  # no JVM: the storage format and the launch are recorded
    assert (new / "server.properties").is_file() and (new / "log4j2.properties").is_file()
    assert stat.S_IMODE(new.stat().st_mode) == 0o700
    assert ran == ["kafka.tools.StorageTool", str(new / "server.properties")]


def test_a_folder_that_cannot_be_made_is_refused_with_exit_2_naming_it(tmp_path: Path) -> None:
    (tmp_path / "a-file").write_text("")
    target = tmp_path / "a-file" / "data"
    r = subprocess.run(
        [sys.executable, "-m", "etlstage_workers.kafka.broker", "--dir", str(target)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 2, r.stderr
    assert f"etlstage-kafka-broker: --dir {target}: cannot be made (Not a directory)" in r.stderr
    assert "Traceback" not in r.stderr
