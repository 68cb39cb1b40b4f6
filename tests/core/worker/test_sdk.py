"""The Python worker SDK in every mode, in-process over in-memory streams and as a process."""

from __future__ import annotations

import io
import subprocess
import sys

import pytest

from etlstage.protocol import DEFAULT_MARKERS, Markers, Scenario
from etlstage.worker import serve

PRINTABLE = Markers(eom=ord("|"), eop=ord("#"), eob=ord("~"), bnc=ord("^"))


def upper(messages):
    return [m.upper() for m in messages]


def frame(markers: Markers, text: str) -> bytes:
    """Write test streams with symbolic markers: / = EOM, . = EOP, ! = EOB, ? = BNC."""
    table = {"/": markers.EOM, ".": markers.EOP, "!": markers.EOB, "?": markers.BNC}
    return b"".join(table.get(ch, ch.encode()) for ch in text)


CASES = [
    # mode, driver, size, input, expected output
    ("single", "supervisor", 1, "a/b//", "A/.B/./."),
    ("batch", "supervisor", 3, "a/b/c/!d/!", "A/B/C/.D/."),
    ("batch", "worker", 3, "a/b/c/d/!", "??A/B/C/.?D/."),
    ("batch", "worker", 1, "a/b/", "A/.B/."),
]


@pytest.mark.parametrize("markers", [DEFAULT_MARKERS, PRINTABLE], ids=["default", "printable"])
@pytest.mark.parametrize("mode, driver, size, given, expected", CASES)
def test_transformer_modes(markers, mode, driver, size, given, expected):
    sc = Scenario(type="T", mode=mode, batch_size=size, batch_driver=driver, markers=markers)
    out = io.BytesIO()
    serve(upper, stdin=io.BytesIO(frame(markers, given)), stdout=out, scenario=sc)
    assert out.getvalue() == frame(markers, expected)


def test_loader_answers_with_eop_only_after_load_returns():
    seen = []
    sc = Scenario(type="L", mode="batch", batch_size=2)
    out = io.BytesIO()
    serve(lambda ms: seen.append(list(ms)), stdin=io.BytesIO(b"a\nb\nc\n\x17"), stdout=out, scenario=sc)
    assert seen == [[b"a", b"b", b"c"]]
    assert out.getvalue() == b"\x00"


def test_extractor_cyclic_calls_on_window_done_when_the_next_request_arrives():
    from etlstage.worker import Extractor

    events = []

    class E(Extractor):
        def extract(self, request):
            events.append(("extract", request.cycle, request.start))
            return [b"m%d" % request.cycle]

        def on_window_done(self, request):
            events.append(("done-before", request.cycle))

    out = io.BytesIO()
    sc = Scenario(type="E", mode="cyclic", offsets="supervisor")
    serve(E(), stdin=io.BytesIO(b'{"start":0,"end":5}\n{"start":5,"end":9}\n'), stdout=out, scenario=sc)
    assert out.getvalue() == b"m0\n\x00m1\n\x00"
    assert events == [("extract", 0, 0), ("done-before", 1), ("extract", 1, 5)]


def test_results_holding_a_marker_fail_the_worker_instead_of_desynchronising():
    from etlstage.errors import MarkerInMessage

    sc = Scenario(type="T", mode="single")
    with pytest.raises(MarkerInMessage, match="EOP marker 0x00"):
        serve(lambda ms: [b"bad\x00byte"], stdin=io.BytesIO(b"a\n"), stdout=io.BytesIO(), scenario=sc)


def test_stray_print_goes_to_stderr_not_to_the_protocol(tmp_path):
    script = tmp_path / "w.py"
    script.write_text(
        "import os\n"
        "from etlstage.worker import run_transformer\n"
        "def f(ms):\n"
        "    print('hello from print')\n"
        "    os.write(1, b'raw write to fd 1\\n')\n"
        "    return ms\n"
        "run_transformer(f)\n"
    )
    proc = subprocess.run(
        [sys.executable, str(script)],
        input=b"x\ny\n",
        capture_output=True,
        env={"ETLSTAGE_TYPE": "T", "ETLSTAGE_MODE": "single", "PATH": "/usr/bin:/bin"},
        timeout=30,
    )
    assert proc.returncode == 0
    assert proc.stdout == b"x\n\x00y\n\x00"
    assert b"hello from print" in proc.stderr and b"raw write to fd 1" in proc.stderr


def test_a_checked_block_is_written_as_it_is_and_rechecked_when_it_no_longer_fits():
    """Results a worker encoded and checked itself (``checked``) are not encoded and scanned
    again; with other markers, or a list changed since, the SDK checks them as any list."""
    from etlstage.errors import MarkerInMessage
    from etlstage.protocol import checked
    from etlstage.worker import Extractor

    class E(Extractor):
        def __init__(self, results):
            self.results = results

        def extract(self, request):
            return self.results

    def run(results, markers=DEFAULT_MARKERS):
        out = io.BytesIO()
        sc = Scenario(type="E", mode="cyclic", markers=markers)
        serve(E(results), stdin=io.BytesIO(markers.EOM), stdout=out, scenario=sc)
        return out.getvalue()

    results = checked([b"a", b"b"], DEFAULT_MARKERS)
    results.block = b"A\nb\n"  # what the SDK writes shows which path it took
    assert run(results) == b"A\nb\n\x00"
    assert run(checked([b"a", b"b"], DEFAULT_MARKERS), PRINTABLE) == b"a|b|#"  # checked for other markers
    changed = checked([b"a"], DEFAULT_MARKERS)
    changed.append(b"bad\x00byte")
    with pytest.raises(MarkerInMessage, match="EOP marker 0x00"):
        run(changed)
