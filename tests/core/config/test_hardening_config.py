"""Hostile or nonsensical pipeline files: exit 2 with the place and the value, never a traceback.

Every case runs the real CLI (`validate`, and `run` where the run path differs).
"""

from __future__ import annotations

import resource
import subprocess

import pytest

from tests.support.run_cli import ETLSTAGE, Run

STAGES = """\
stages:
  - {name: src, type: E, command: ["{PY}", "{TW}", count, "3"]}
  - {name: sink, type: L, command: ["{PY}", "{TW}", append, out.txt]}
"""

BOMB = """\
a: &a ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]
b: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]
c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b]
d: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c]
e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d]
f: &f [*e, *e, *e, *e, *e, *e, *e, *e, *e]
g: &g [*f, *f, *f, *f, *f, *f, *f, *f, *f]
h: &h [*g, *g, *g, *g, *g, *g, *g, *g, *g]
i: &i [*h, *h, *h, *h, *h, *h, *h, *h, *h]
stages:
  - {name: src, type: E, command: *i}
  - {name: sink, type: L, command: [y]}
"""


def limited(pdir, *args: str, timeout: float = 120) -> Run:
    """The CLI under a 2 GB address-space limit, so an unbounded expansion fails instead of swapping."""

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))

    proc = subprocess.run(
        [*ETLSTAGE, *args], cwd=pdir.path, capture_output=True, text=True, timeout=timeout, preexec_fn=limit
    )
    return Run(proc.returncode, proc.stdout, proc.stderr)


def assert_config_error(r: Run, *expected: str) -> None:
    assert r.code == 2, (r.code, r.stderr)
    assert "Traceback" not in r.stderr, r.stderr
    for text in expected:
        assert text in r.stderr, r.stderr


@pytest.mark.parametrize("command", ["validate", "run"])
def test_a_yaml_bomb_is_refused_in_bounded_time_and_memory(pdir, command):
    pdir.write(BOMB)
    r = limited(pdir, command, "stages.yaml", timeout=60)
    assert_config_error(r, "stages.yaml:6:", "alias *e", "more than 100,000 values", "YAML bomb")


def test_an_alias_inside_the_collection_it_names_is_refused(pdir):
    pdir.write("x: &x [1, *x]\n" + STAGES)
    assert_config_error(limited(pdir, "validate", "stages.yaml"), "stages.yaml:1:11:", "*x", "contains itself")


def test_aliases_within_the_limits_still_work(pdir):
    pdir.write("""\
        stages:
          - &src {name: src, type: E, restart: &r {max_restarts: 2}, command: ["{PY}", "{TW}", count, "3"]}
          - {<<: *src, name: sink, type: L, restart: *r, command: ["{PY}", "{TW}", append, out.txt]}
    """)
    r = pdir.etlstage("validate", "stages.yaml")
    assert r.code == 0, r.stderr


@pytest.mark.parametrize("style", ["flow", "block"])
def test_deep_nesting_is_refused_with_its_line(pdir, style):
    depth = 5000 if style == "flow" else 500  # 5000 levels of block style would be over 1 MiB
    if style == "flow":
        deep = "env: {A: " + "[" * depth + "]" * depth + "}"
    else:
        deep = "env:\n" + "".join(f"{'  ' * (i + 1)}k{i}:\n" for i in range(depth)) + "  " * (depth + 1) + "v"
    (pdir.path / "stages.yaml").write_text(f"name: deep\n{deep}\n" + STAGES)
    r = limited(pdir, "validate", "stages.yaml", timeout=60)
    assert_config_error(r, "nested more than 50 levels deep")
    assert "stages.yaml:2:" in r.stderr or "stages.yaml:5" in r.stderr, r.stderr


def test_a_command_with_an_unclosed_quote_is_named_with_its_line(pdir):
    pdir.write("""\
        services:
          - {name: helper, ready: exit, command: "sh -c 'true"}
        stages:
          - {name: src, type: E, command: "python3 -c \\"print(1)"}
          - {name: sink, type: L, command: ["{PY}", "{TW}", append, out.txt]}
    """)
    for command in ("validate", "run"):
        r = pdir.etlstage(command, "stages.yaml")
        assert_config_error(
            r,
            'stages.yaml:2: services[0].command: "sh -c \'true" cannot be split into arguments: No closing quotation',
            "stages.yaml:4: stages[0].command: 'python3 -c \"print(1)' cannot be split",
        )


@pytest.mark.parametrize(
    "state_dir, expected",
    [
        ("not-a-dir.txt", "exists and is not a directory"),
        ("/proc/etlstage-state", "on a kernel file system"),
        ("/proc/1", "on a kernel file system"),
        ('"state\\0dir"', "holds a NUL byte"),
    ],
)
def test_a_state_dir_that_cannot_be_one_is_reported_by_validate_and_run(pdir, state_dir, expected):
    (pdir.path / "not-a-dir.txt").write_text("a file\n")
    pdir.write(f"name: p\nstate_dir: {state_dir}\n" + STAGES)
    for command in ("validate", "run"):
        r = (
            pdir.etlstage(command, "stages.yaml", "--once")
            if command == "run"
            else pdir.etlstage(command, "stages.yaml")
        )
        assert_config_error(r, "stages.yaml:2: state_dir:", expected)
    assert (pdir.path / "not-a-dir.txt").read_text() == "a file\n"


@pytest.mark.parametrize(
    "setting, expected",
    [
        ('max_message_bytes: "0.0001B"', "stages[1].max_message_bytes: '0.0001B' is less than 1 byte"),
        ("max_message_bytes: 0", "stages[1].max_message_bytes: 0 is not valid"),
        ('max_rss: "1.3KiB"', "stages[1].max_rss: '1.3KiB' is 1331.2 bytes, not a whole number of bytes"),
        ("linger: .inf", "stages[1].linger: .inf is not a finite number"),
        ("poll_interval: .nan", "stages[1].poll_interval: .nan is not a finite number"),
        ("stop_timeout: .inf", "stages[1].stop_timeout: .inf is not a finite number"),
        ("timeouts: {request: .inf}", "stages[1].timeouts.request: .inf is not a finite number"),
        ("timeouts: {startup: 0}", "stages[1].timeouts.startup: 0 is not valid"),
    ],
)
def test_nonsense_sizes_and_numbers_are_refused(pdir, setting, expected):
    pdir.write(STAGES.replace("append, out.txt]}", f"append, out.txt], {setting}}}"))
    assert_config_error(pdir.etlstage("validate", "stages.yaml"), f"stages.yaml:3: {expected}")


def test_a_pipeline_size_below_one_byte_is_refused(pdir):
    pdir.write('buffer_bytes: "0.5"\n' + STAGES)
    assert_config_error(
        pdir.etlstage("validate", "stages.yaml"), "stages.yaml:1: buffer_bytes: '0.5' is less than 1 byte"
    )


def test_sizes_in_whole_bytes_still_parse(pdir):
    pdir.write(STAGES.replace("append, out.txt]}", 'append, out.txt], max_message_bytes: "1.5KiB"}'))
    r = pdir.etlstage("validate", "stages.yaml")
    assert r.code == 0, r.stderr


def test_a_non_utf8_byte_is_placed_by_line_and_column(pdir):
    line = STAGES.splitlines()[2]
    column = line.index("out.txt") + 4  # 1-based, the byte after "out"
    text = STAGES.replace("out.txt", "out\xff.txt").encode("utf-8").replace(b"\xc3\xbf", b"\xff")
    (pdir.path / "stages.yaml").write_bytes(text)
    r = pdir.etlstage("validate", "stages.yaml")
    assert_config_error(r, f"stages.yaml:3:{column}: byte 0xff is not UTF-8 text; save the file as UTF-8")


def test_a_character_yaml_forbids_is_placed_by_line_and_column(pdir):
    (pdir.path / "stages.yaml").write_text(STAGES + "# a bell \x07\n")
    assert_config_error(pdir.etlstage("validate", "stages.yaml"), "stages.yaml:4:10: not valid YAML: character U+0007")


@pytest.mark.parametrize(
    "change, expected",
    [
        (("name: sink", 'name: "sink\\n"'), "stages.yaml:3: stages[1].name: 'sink\\n' holds control characters"),
        (("stages:", 'name: "p\\rforged"\nstages:'), "stages.yaml:1: name: 'p\\rforged' holds control characters"),
        (("out.txt]}", 'out.txt], env: {"A=B": x}}'), "stages[1].env: 'A=B' is not an environment variable name"),
        (("out.txt]}", 'out.txt], cwd: "a\\0b"}'), "stages[1].cwd: 'a\\x00b' holds a NUL byte"),
        (("out.txt]}", '"out\\0.txt"]}'), "stages[1].command: 'out\\x00.txt' holds a NUL byte"),
    ],
)
def test_names_and_values_that_would_break_logs_or_exec_are_refused(pdir, change, expected):
    pdir.write(STAGES.replace(*change))
    assert_config_error(pdir.etlstage("validate", "stages.yaml"), expected)
