"""stages.yaml mistakes are told in the file's terms: the key's own line, a likely spelling, YAML words."""

from __future__ import annotations

import pytest

from etlstage.config.loader import parse_config
from etlstage.errors import ConfigError

GOOD_L = "  - name: out\n    type: L\n    command: [cat]\n"


def problems(text: str) -> str:
    with pytest.raises(ConfigError) as err:
        parse_config(text, "stages.yaml")
    return str(err.value)


def test_a_misspelt_key_is_placed_at_its_line_with_the_key_it_is_likely_meant_to_be():
    text = "stages:\n  - name: src\n    type: E\n    command: [x]\n    batch_sise: 3\n" + GOOD_L
    assert "stages.yaml:5: stages[0].batch_sise: unknown key 'batch_sise'; did you mean 'batch_size'?" in problems(text)


def test_a_key_like_no_other_lists_the_known_keys():
    text = "stages:\n  - name: src\n    type: E\n    command: [x]\n    colour: red\n" + GOOD_L
    assert "stages.yaml:5: stages[0].colour: unknown key 'colour'; known keys: batch_bytes," in problems(text)


def test_a_misspelt_choice_gets_a_suggestion():
    text = "stages:\n  - name: src\n    type: E\n    mode: cylic\n    command: [x]\n" + GOOD_L
    assert "stages[0].mode: 'cylic' is not one of 'plain', 'cyclic', 'single', 'batch'; did you mean 'cyclic'?" in (
        problems(text)
    )


@pytest.mark.parametrize(
    "line, expected",
    [
        # an empty value is YAML's null, not Python's None
        ("    batch_size:\n", "stages[0].batch_size: null (an empty value) is not a whole number"),
        # the alternative meant for a number explains a number, with what the key takes
        (
            "    timeouts: {startup: 0}\n",
            "stages[0].timeouts.startup: 0 is not valid: 0 is not more than 0; expected seconds, more than 0; "
            "null for no limit",
        ),
        ("    env: [a, b]\n", "stages[0].env: [a, b] is not a mapping of keys to values"),
        ("    prefetch: true\n", "stages[0].prefetch: true is not a whole number"),
    ],
)
def test_schema_problems_show_values_as_yaml_writes_them(line: str, expected: str):
    text = "stages:\n  - name: src\n    type: E\n    command: [x]\n" + line + GOOD_L
    told = problems(text)
    assert expected in told
    assert "None" not in told and "of type" not in told


def test_too_few_stages_is_counted_not_dumped():
    told = problems("stages:\n  - name: src\n    type: E\n    command: [x]\n")
    assert "stages.yaml:1: stages: a pipeline needs at least an E-stage and an L-stage; this one has 1 stage(s)" in told
    assert "{'name'" not in told


@pytest.mark.parametrize(
    "text, expected",
    [
        (
            "stages:\n  - name: a\n    type: E\n  command: x\n",
            "stages.yaml:4:3: not valid YAML: this line is not indented like the lines above it",
        ),
        (
            "stages:\n  - name: a\n    type: E\n   command: x\n",
            "stages.yaml:4:4: not valid YAML: this line is not indented like the lines above it",
        ),
        ("stages:\n  - name: a\n    command: echo a: b\n", "a value holding ': ' needs quotes"),
        ("stages:\n\t- name: a\n", "stages.yaml:2:1: not valid YAML: a tab: YAML indents with spaces only"),
        ("stages:\n  - name: 'a\n", "the file ends inside a quote opened on line 2 that is never closed"),
        ("stages: [\n", "stages.yaml:2:1: not valid YAML: the file ends inside a '[' or '{' that is never closed"),
        ("stages:\n  name: a\n  - x\n", "a list item ('- ') where a key was expected"),
        ("stages: *x\n", "*x names no anchor &x defined before it"),
        ("name: {{ x }}\n", "a {{ template }}?"),
        ("name: @x\n", "a value cannot start with '@'; put the value in quotes"),
    ],
)
def test_parser_problems_are_told_in_terms_of_the_file(text: str, expected: str):
    told = problems(text)
    assert expected in told
    assert "<block" not in told and "token" not in told
