"""A plain extractor run again never reloads silently: the run says what the earlier one
delivered and when, or refuses (``rerun: refuse``, exit 2)."""

from __future__ import annotations


def stages(rerun: str = "") -> str:
    key = f"rerun: {rerun}, " if rerun else ""
    return f"""
        stages:
          - {{name: src, type: E, {key}command: ["{{PY}}", "{{TW}}", count, "12"]}}
          - {{name: sink, type: L, command: ["{{PY}}", "{{TW}}", append, out.txt]}}
    """


def test_a_plain_extractor_run_again_says_what_it_delivered_before_and_when(pdir):
    pdir.write(stages())
    first = pdir.run("--once")
    assert first.code == 0 and "already delivered" not in first.stderr
    again = pdir.run("--once")
    assert again.code == 0, again.stderr
    assert "stage 'src' is a plain extractor that already delivered 12 message(s) in a run, the last completed at" in (
        again.stderr
    )
    assert "extracting it again now" in again.stderr
    assert len(pdir.lines("out.txt")) == 24  # loaded again, as said


def test_rerun_refuse_stops_the_run_before_anything_is_extracted(pdir):
    pdir.write(stages("refuse"))
    assert pdir.run("--once").code == 0
    again = pdir.run("--once")
    assert again.code == 2, again.stderr
    assert "already delivered 12 message(s)" in again.stderr and "rerun: refuse stops a run" in again.stderr
    assert "Traceback" not in again.stderr
    assert len(pdir.lines("out.txt")) == 12


def test_rerun_on_a_stage_that_is_not_a_plain_extractor_is_refused(pdir):
    pdir.write("""
        stages:
          - {name: src, type: E, mode: cyclic, rerun: refuse, command: [x]}
          - {name: sink, type: L, command: [x]}
    """)
    r = pdir.run("--once")
    assert r.code == 2 and "only a plain E-stage" in r.stderr, r.stderr
