"""${VAR} in stages.yaml values, as docker compose reads them."""

from __future__ import annotations

import pytest

from etlstage.config.loader import parse_config
from etlstage.errors import ConfigError

TEXT = """\
stages:
  - name: src
    type: E
    command: {command}
    batch_size: {batch}
    env: {{GREETING: {greeting}}}
  - name: out
    type: L
    command: [cat]
"""


def stage(command: str = "[x]", batch: str = "1", greeting: str = "hi", env: dict[str, str] | None = None):
    text = TEXT.format(command=command, batch=batch, greeting=greeting)
    return parse_config(text, "stages.yaml", environ=env or {}).stages[0]


def test_a_variable_fills_a_value_and_an_unquoted_one_is_typed_as_written():
    s = stage(command="[python3, '${APP}/x.py', '--tag=$${HOME}']", batch="${N:-100}", env={"APP": "/opt/app"})
    assert s.command == ["python3", "/opt/app/x.py", "--tag=${HOME}"]
    assert s.batch_size == 100 and isinstance(s.batch_size, int)
    assert stage(batch="${N:-100}", env={"N": "7"}).batch_size == 7


def test_defaults_follow_compose_for_unset_and_empty():
    assert stage(greeting="'${G:-dflt}'", env={"G": ""}).env["GREETING"] == "dflt"
    assert stage(greeting="'${G-dflt}'", env={"G": ""}).env["GREETING"] == ""
    assert stage(greeting="'${G-dflt}'").env["GREETING"] == "dflt"
    # a quoted value stays text; a $ before anything but { or $ is left alone
    assert stage(greeting="'${G}'", env={"G": "42"}).env["GREETING"] == "42"
    assert stage(greeting="'cost $5 $$'").env["GREETING"] == "cost $5 $"


@pytest.mark.parametrize(
    "field, expected",
    [
        (
            {"greeting": "'${MISSING}'"},
            "stages.yaml:6:21: ${MISSING}: the environment variable MISSING is not set; set it, "
            "or give a default: ${MISSING:-value}",
        ),
        ({"greeting": "'${TOKEN:?give the API token}'"}, "stages.yaml:6:21: ${TOKEN}: give the API token"),
        ({"greeting": "'${1BAD}'"}, "stages.yaml:6:21: '${1BAD}': '${' starts no variable reference"),
        # the typed result is checked like any value, at its place
        ({"batch": "${N}"}, "stages.yaml:5: stages[0].batch_size: 'many' is not a whole number"),
    ],
)
def test_a_reference_that_cannot_be_filled_names_its_place(field: dict[str, str], expected: str):
    with pytest.raises(ConfigError) as err:
        stage(**field, env={"N": "many"})
    assert expected in str(err.value)


def test_the_cli_reads_the_environment(pdir):
    pdir.write("stages:\n  - {name: a, type: E, command: [cat]}\n  - {name: l, type: L, command: ['${SINK}']}\n")
    r = pdir.etlstage("validate", "stages.yaml", env={"SINK": "cat"})
    assert r.code == 0, r
    r = pdir.etlstage("validate", "stages.yaml")
    assert (
        r.code == 2
        and "${SINK}: the environment variable SINK is not set" in r.stderr
        and "Traceback" not in (r.stderr)
    )


@pytest.mark.parametrize(
    "env, expected",
    [
        ({"A": "a", "B": "b", "C": "c"}, "a"),
        ({"A": "a"}, "a"),  # a default not used is not expanded: C unset is no error
        ({"B": "b"}, "b"),
        ({"A": "", "B": "b", "C": "c"}, "b"),
        ({"C": "c"}, "c"),
        ({"B": "", "C": "c"}, "c"),
    ],
)
def test_defaults_nest_as_posix_shells_read_them(env: dict[str, str], expected: str):
    s = stage(command="[w, '${A:-${B:-${C}}}', 'x${A:-${B:-y}}z}']", env=env)
    assert s.command == ["w", expected, "x" + (env.get("A") or env.get("B") or "y") + "z}"]


def test_a_nested_reference_that_is_used_and_unset_names_its_place():
    with pytest.raises(ConfigError) as err:
        stage(greeting="'${A:-${B:-${C}}}'")
    assert "stages.yaml:6:21: ${C}: the environment variable C is not set" in str(err.value)
    with pytest.raises(ConfigError) as err:
        stage(greeting="'${A:?${B:-need A}}'")
    assert "stages.yaml:6:21: ${A}: need A" in str(err.value)


@pytest.mark.parametrize(
    "value, what",
    [
        ("'${A:-${B:-x}'", "'${A:-' has no closing '}'"),
        ("'${A:-x'", "'${A:-' has no closing '}'"),
        ("'${A'", "'${A' has no closing '}'"),
        ("'${A x}'", "'${A' is followed by ' '"),
        ("'${A:-${}}'", "'${' starts no variable reference"),
    ],
)
def test_unbalanced_or_malformed_references_are_refused_with_their_place(value: str, what: str):
    # set or not, the syntax is checked: a malformed default is an error even when unused
    for env in ({}, {"A": "a", "B": "b"}):
        with pytest.raises(ConfigError) as err:
            stage(greeting=value, env=env)
        assert "stages.yaml:6:21: " in str(err.value) and what in str(err.value), str(err.value)


def test_the_cli_refuses_an_unbalanced_reference_with_exit_2_and_the_line(pdir):
    pdir.write("stages:\n  - {name: a, type: E, command: [cat]}\n  - {name: l, type: L, command: ['${A:-${B}']}\n")
    r = pdir.etlstage("validate", "stages.yaml", env={"A": "cat"})
    assert r.code == 2 and "stages.yaml:3:" in r.stderr and "has no closing '}'" in r.stderr, r
    assert "Traceback" not in r.stderr
