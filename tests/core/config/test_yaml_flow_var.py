"""An unquoted ${VAR} inside a YAML flow list is named, with the fix (quote it)."""

from __future__ import annotations

import pytest

from etlstage.config.loader import parse_config
from etlstage.errors import ConfigError

FLOW = """stages:
  - {name: src, type: E, command: [python3, ${SCRIPT}]}
  - {name: sink, type: L, command: [cat]}
"""


def test_an_unquoted_variable_in_a_flow_list_says_to_quote_it():
    with pytest.raises(ConfigError) as caught:
        parse_config(FLOW, environ={"SCRIPT": "x.py"})
    text = str(caught.value)
    assert text.startswith("stages.yaml:2:"), text
    assert "a ${VAR} there needs quotes" in text and '"${VAR}"' in text, text


def test_quoted_it_loads():
    config = parse_config(FLOW.replace("${SCRIPT}", '"${SCRIPT}"'), environ={"SCRIPT": "x.py"})
    assert list(config.stages[0].command) == ["python3", "x.py"]
