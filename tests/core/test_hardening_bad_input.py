"""Odd input from workers and files: a clear message (exit 2 where it stops the run), never a traceback."""

from __future__ import annotations

import json
import time

import pytest

from tests.support.live_run import LiveRun

# Each T-stage's worker writes a report file of the wrong shape, then passes messages on.
ODD_REPORTS = {
    "t_list": "[1,2]",
    "t_deep": '{"n": 2, "a": {"b": {"c": 1}}, "mixed": {"x": 1, "y": "two"}}',
    "t_text": '{"ok": 3, "s": "x", "flag": true, "none": null}',
}


def _odd_stages() -> str:
    stages = [
        '  - {name: src, type: E, mode: cyclic, poll_interval: 0.2, command: ["{PY}", "{TW}", count, "1000000", "50"]}'
    ]
    for name, body in ODD_REPORTS.items():
        script = f'printf \'%s\' \'{body}\' > "$ETLSTAGE_STATE_DIR/report-$ETLSTAGE_INSTANCE-$$.json"; exec "$0" "$@"'
        stages.append(
            f"  - {{name: {name}, type: T, mode: batch, command: [sh, -c, {json.dumps(script)}, '{{PY}}', '{{TW}}', pass]}}"
        )
    stages.append('  - {name: sink, type: L, mode: batch, command: ["{PY}", "{TW}", append, out.txt]}')
    return "name: odd\nstages:\n" + "\n".join(stages) + "\n"


@pytest.mark.slow
def test_report_files_that_are_not_numbers_are_ignored_with_one_warning(pdir):
    pdir.write(_odd_stages())
    with LiveRun(pdir.path) as run:
        deadline = time.monotonic() + 30
        while "t_text" not in run.get("/api/status")[2] or '"ok":3' not in run.get("/api/status")[2]:
            assert time.monotonic() < deadline, run.stderr
            time.sleep(0.2)
        for path in ("/", "/api/status", "/metrics"):
            status, _, body = run.get(path)
            assert status == 200, (path, body[-2000:])
        assert run.get("/api/status")[0] == 200  # asked again: still answered, still one warning each
        code = run.stop()
    assert code == 0, run.stderr
    assert "Traceback" not in run.stderr
    for name in ODD_REPORTS:
        warned = [line for line in run.lines if f"stage {name}:" in line and "report-0-" in line]
        assert len(warned) == 1, (name, run.stderr[-3000:])
    assert "t_text: ok 3" in run.stderr  # the numbers that are there still count
    assert "t_deep: n 2, mixed (x 1)" in run.stderr
