"""stages.yaml: every problem at once, each with its line; no traceback for any mistake."""

from __future__ import annotations

import json

import pytest

from etlstage.config.loader import parse_config, parse_size
from etlstage.errors import ConfigError

SCHEMA_ERRORS = """\
stages:
  - name: a
    type: E
    command: [x]
  - name: t
    type: T
    batch_size: -1
    colour: red
    command: []
  - name: l
    type: L
    timeouts: {startup: soon}
    command: y
"""


def test_every_schema_problem_is_reported_with_its_line(pdir):
    pdir.write(SCHEMA_ERRORS)
    r = pdir.etlstage("validate", "stages.yaml")
    assert r.code == 2
    assert "4 problems" in r.stderr
    assert (
        "stages.yaml:8: stages[1].colour: unknown key 'colour'; known keys: batch_bytes, batch_driver, batch_id, batch_size"
        in r.stderr
    )
    assert "stages.yaml:7: stages[1].batch_size: -1 is less than the minimum of 1" in r.stderr
    assert "stages.yaml:9: stages[1].command: [] is not valid: needs at least 1 item(s); has 0" in r.stderr
    assert "stages.yaml:12: stages[2].timeouts.startup: 'soon' is not valid" in r.stderr
    assert "Traceback" not in r.stderr
    assert pdir.run("--once").code == 2  # run validates first


@pytest.mark.parametrize(
    "text, expected",
    [
        (
            "stages:\n  - {name: a, type: E, command: x}\n  - {name: a, type: L, command: y}\n",
            "stage name 'a' is used twice",
        ),
        (
            "stages:\n  - {name: l, type: L, command: y}\n  - {name: a, type: E, command: x}\n",
            "one or more E, then any T, then one or more L",
        ),
        (
            "markers: {eom: '|', eop: '|'}\nstages:\n  - {name: a, type: E, command: x}\n  - {name: l, type: L, command: y}\n",
            "markers eom and eop are both 0x7c",
        ),
        (
            "stages:\n  - {name: a, type: E, mode: cyclic, offsets: supervisor, command: x}\n"
            "  - {name: l, type: L, command: y}\n",
            "offsets: supervisor needs an offset_policy",
        ),
        (
            "stages:\n  - {name: a, type: E, mode: batch, command: x}\n  - {name: l, type: L, command: y}\n",
            "'batch' is not a mode of a E-stage",
        ),
        (
            "stages:\n  - {name: a, type: E, command: x}\n  - {name: l, type: L, markers: {eom: 300}, command: y}\n",
            "stages[1].markers.eom",
        ),
        ("stages: [\n", "not valid YAML"),
        ("- just\n- a list\n", "expected a mapping with a 'stages' list"),
    ],
)
def test_semantic_and_syntax_problems_are_clear(text, expected):
    with pytest.raises(ConfigError) as err:
        parse_config(text, "stages.yaml")
    assert expected in str(err.value)


def test_defaults_apply_to_every_stage_and_sizes_parse():
    config = parse_config(
        "defaults: {restart: {max_restarts: 9}, max_message_bytes: 2MiB}\n"
        "stages:\n  - {name: a, type: E, command: 'x --flag \"two words\"'}\n  - {name: l, type: L, command: [y]}\n"
    )
    assert [s.restart.max_restarts for s in config.stages] == [9, 9]
    assert config.stages[0].command == ["x", "--flag", "two words"]
    assert config.stages[1].max_message_bytes == 2 << 20
    assert parse_size("1.5GB", "x") == 1_500_000_000 and parse_size("512k", "x") == 512 * 1024


def test_schema_command_prints_the_shipped_json_schema(pdir):
    r = pdir.etlstage("schema")
    assert r.code == 0
    schema = json.loads(r.stdout)
    assert schema["$defs"]["stage"]["additionalProperties"] is False
    assert "partition_by" in schema["$defs"]["stage"]["properties"]


def test_every_key_of_the_schema_is_documented():
    """docs/stages-yaml.md has a row for every pipeline, stage and service key."""
    import json
    import re
    from importlib import resources

    from tests.support.paths import ROOT

    schema = json.loads(resources.files("etlstage.config").joinpath("stages.schema.json").read_text())
    doc = (ROOT / "docs" / "stages-yaml.md").read_text()
    rows = set(re.findall(r"^\| `([a-z_]+)` \|", doc, flags=re.M))
    stage = schema["$defs"]["stage"]["properties"]
    wanted = set(schema["properties"]) | set(stage)
    assert not wanted - rows, f"keys with no row in docs/stages-yaml.md: {sorted(wanted - rows)}"


# A stage in which each key of the table below applies, by the key's documented default.
DEFAULT_HOSTS = {
    "batch_bytes": "{type: T, mode: batch}",
    "replay_bytes": "{type: T, mode: batch}",
    "batch_driver": "{type: T, mode: batch}",
    "linger": "{type: T, mode: batch}",
    "offsets": "{type: E, mode: cyclic}",
    "poll_interval": "{type: E, mode: cyclic}",
    "instances": "{type: T}",
    "on_failure": "{type: T}",
    "max_message_bytes": "{type: T}",
    "stop_timeout": "{type: T}",
    "protocol": "{type: T}",
    "protocol_version": "{type: T, protocol: kcl-multilang}",
}


@pytest.mark.parametrize("key", sorted(DEFAULT_HOSTS))
def test_a_stage_keys_documented_default_is_the_one_a_missing_key_gets(key):
    """docs/stages-yaml.md's default for a key, written out, loads as the key left out does."""
    import re

    from tests.support.paths import ROOT

    doc = (ROOT / "docs" / "stages-yaml.md").read_text()
    row = re.search(rf"^\| `{key}` \| `([^`|]+)` \|", doc, flags=re.M)
    assert row, f"docs/stages-yaml.md has no single default for {key}"

    def stage(extra: str) -> object:
        host = DEFAULT_HOSTS[key][1:-1] + extra
        source = host if "type: E" in host else "type: E, command: [x]"
        middle = [f"  - {{name: s, command: [y], {host}}}\n"] if "type: T" in host else []
        text = "".join(
            [
                "stages:\n",
                f"  - {{name: e, command: [x], {source}}}\n",
                *middle,
                "  - {name: l, type: L, command: [z]}\n",
            ]
        )
        return parse_config(text).stages[0 if "type: E" in host else 1]

    documented = stage(f", {key}: {row.group(1)}")
    assert documented == stage(""), f"{key}: documented {row.group(1)!r}"
