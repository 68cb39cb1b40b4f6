"""A document found valid once is not checked again (jsonschema is not imported), and
nothing else ever skips the check: not a document that differs only in a value's type,
not a cache file someone else could have written."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from etlstage.config import verdicts
from etlstage.config.loader import parse_config
from etlstage.errors import ConfigError

VALID = """\
stages:
  - {name: e, type: E, command: [x]}
  - {name: l, type: L, batch_size: 10, command: [y]}
"""

# the same document with 10 as text, as true, as 10.0: the schema wants a whole number
AS_TEXT = VALID.replace("batch_size: 10", "batch_size: '10'")
AS_TRUE = VALID.replace("batch_size: 10", "batch_size: true")


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "cache"
    monkeypatch.setenv(verdicts.ENV, str(folder))
    return folder


def _imports_jsonschema(text: str, folder: Path, tmp_path: Path) -> bool:
    """Whether parsing ``text`` in a fresh interpreter imports jsonschema."""
    (tmp_path / "stages.yaml").write_text(text)
    code = (
        "import sys\n"
        "from etlstage.config.loader import load_config\n"
        "load_config(sys.argv[1])\n"
        "print('jsonschema' in sys.modules)\n"
    )
    env = {**os.environ, verdicts.ENV: str(folder)}
    out = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path / "stages.yaml")], env=env, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    return out.stdout.strip() == "True"


def test_a_valid_document_is_checked_once_then_known(cache: Path, tmp_path: Path) -> None:
    assert _imports_jsonschema(VALID, cache, tmp_path)
    assert not _imports_jsonschema(VALID, cache, tmp_path)
    assert (cache / verdicts.FILE).stat().st_mode & 0o777 == 0o600
    assert cache.stat().st_mode & 0o777 == 0o700


@pytest.mark.parametrize("text", [AS_TEXT, AS_TRUE, VALID.replace("batch_size: 10", "batch_size: 10.5")])
def test_a_document_differing_only_in_a_value_s_type_is_still_checked(cache: Path, text: str) -> None:
    parse_config(VALID)
    with pytest.raises(ConfigError, match="batch_size"):
        parse_config(text)
    with pytest.raises(ConfigError, match="batch_size"):  # and again: no problem is remembered
        parse_config(text)


def test_the_key_tells_int_text_float_and_bool_apart() -> None:
    keys = {verdicts.digest("{}", {"a": v}) for v in (1, "1", 1.0, True)}
    assert len(keys) == 4
    assert verdicts.digest("{}", {1: "a"}) != verdicts.digest("{}", {"1": "a"})  # YAML keys need not be text
    assert verdicts.digest("{}", {"a": 1}) != verdicts.digest('{"x": 1}', {"a": 1})  # another schema


def test_only_plain_yaml_values_are_keyed() -> None:
    import datetime as dt

    assert verdicts.digest("{}", {"a": [1, None, {"b": 2.5}]}) is not None
    assert verdicts.digest("{}", {"a": dt.date(2026, 1, 1)}) is None
    assert verdicts.digest("{}", {"a": object()}) is None


@pytest.mark.parametrize("damage", ["others_can_write", "garbage", "a_link"])
def test_a_cache_file_someone_else_could_have_written_is_ignored(cache: Path, tmp_path: Path, damage: str) -> None:
    assert _imports_jsonschema(VALID, cache, tmp_path)
    path = cache / verdicts.FILE
    if damage == "others_can_write":
        path.chmod(0o666)
    elif damage == "garbage":
        path.write_bytes(b"\xff" * 100 + b"\n" + b"z" * 64 + b"\n")
    else:
        real = tmp_path / "elsewhere"
        real.write_bytes(path.read_bytes())
        real.chmod(0o600)  # ours and owner-only: only the link itself is refused
        path.unlink()
        path.symlink_to(real)
    assert _imports_jsonschema(VALID, cache, tmp_path)


def test_off_keeps_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(verdicts.ENV, "off")
    monkeypatch.setenv("HOME", str(tmp_path))
    parse_config(VALID)
    assert not any(tmp_path.rglob(verdicts.FILE))


def test_by_default_it_is_kept_in_a_folder_of_its_own(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(verdicts.ENV)
    monkeypatch.setenv("HOME", str(tmp_path))
    shared = tmp_path / ".cache" / "etlstage"
    shared.mkdir(parents=True, mode=0o755)
    parse_config(VALID)
    assert (shared / "config" / verdicts.FILE).is_file()
    assert (shared / "config").stat().st_mode & 0o777 == 0o700
    assert shared.stat().st_mode & 0o777 == 0o755  # the jar and class caches' folder is left as it was


def test_the_file_keeps_the_most_recent_digests_only(cache: Path) -> None:
    keys = [verdicts.digest("{}", {"n": i}) for i in range(verdicts.KEEP + 5)]
    for k in keys:
        verdicts.remember(k)
    assert not verdicts.known_valid(keys[0])
    assert verdicts.known_valid(keys[-1]) and verdicts.known_valid(keys[5])
    assert len((cache / verdicts.FILE).read_text().split()) == verdicts.KEEP


def test_a_folder_that_is_not_ours_to_keep_is_left_alone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = tmp_path / "shared"
    folder.mkdir(mode=0o777)
    folder.chmod(0o777)
    (folder / "x").write_text("")
    monkeypatch.setenv(verdicts.ENV, str(folder / "x" / "below-a-file"))
    parse_config(VALID)  # the cache cannot be kept: the document is checked, no error
    assert not (folder / "x" / "below-a-file").exists()
