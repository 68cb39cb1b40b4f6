"""The line of a worker's stderr a failure's headline quotes: its cause, not its last line."""

from __future__ import annotations

import os
import shutil
import sys
import textwrap
import time
from pathlib import Path

import pytest

from etlstage.kit.telling import telling_line
from etlstage.spark.tasks.process import WorkerProcess

NODE_MISSING = """\
node:internal/modules/cjs/loader:1210
  throw err;
  ^

Error: Cannot find module 'etlstage-worker'
Require stack:
- /home/ann/p/enrich.js
    at Module._resolveFilename (node:internal/modules/cjs/loader:1207:15)
    at Module._load (node:internal/modules/cjs/loader:1038:27)
    at Module.require (node:internal/modules/cjs/loader:1289:19)
    at require (node:internal/modules/helpers:182:18)
    at Object.<anonymous> (/home/ann/p/enrich.js:1:11)
    at Module._compile (node:internal/modules/cjs/loader:1521:14)
    at Module._extensions..js (node:internal/modules/cjs/loader:1623:10)
    at Module.load (node:internal/modules/cjs/loader:1266:32)
    at Module._load (node:internal/modules/cjs/loader:1091:12)
    at Function.executeUserEntryPoint [as runMain] (node:internal/modules/run_main:164:12) {
  code: 'MODULE_NOT_FOUND',
  requireStack: [ '/home/ann/p/enrich.js' ]
}

Node.js v20.20.2"""

NODE_JSON = """\
undefined:1
alpha
^

SyntaxError: Unexpected token 'a', "alpha" is not valid JSON
    at JSON.parse (<anonymous>)
    at /home/ann/p/enrich.js:4:22

Node.js v20.20.2"""

PYTHON = """\
2026-12-02 01:01:57,592 INFO enrich: started
Traceback (most recent call last):
  File "/home/ann/p/load.py", line 9, in <module>
    main(Load())
  File "/home/ann/p/load.py", line 5, in load
    raise KeyError(m)
KeyError: 'id'

During handling of the above exception, another exception occurred:

Traceback (most recent call last):
  File "/home/ann/p/load.py", line 7, in load
    raise ValueError("row 7: no id")
ValueError: row 7: no id"""

JAVA = """\
Exception in thread "main" java.lang.RuntimeException: load failed
\tat com.acme.Load.main(Load.java:12)
Caused by: java.io.FileNotFoundException: /data/out.csv (Permission denied)
\tat java.base/java.io.FileOutputStream.open0(Native Method)
\t... 3 more"""

GO = """\
panic: assignment to entry in nil map

goroutine 1 [running]:
main.main()
\t/home/ann/p/main.go:2 +0x2e
exit status 2"""

RUST = """\
thread 'main' panicked at src/main.rs:2:5:
lookup table corrupt
note: run with `RUST_BACKTRACE=1` environment variable to display a backtrace"""


@pytest.mark.parametrize(
    ("stderr", "expected"),
    [
        (NODE_MISSING, "Error: Cannot find module 'etlstage-worker'"),
        (NODE_JSON, "SyntaxError: Unexpected token 'a', \"alpha\" is not valid JSON"),
        (PYTHON, "ValueError: row 7: no id"),
        (JAVA, "Caused by: java.io.FileNotFoundException: /data/out.csv (Permission denied)"),
        (GO, "panic: assignment to entry in nil map"),
        (RUST, "thread 'main' panicked at src/main.rs:2:5: lookup table corrupt"),
        ("enrich: lookup table corrupt at row 7", "enrich: lookup table corrupt at row 7"),
        ("\n\nNode.js v20.20.2\n", None),
    ],
    ids=["node-module", "node-json", "python", "java", "go", "rust", "plain", "nothing"],
)
def test_the_telling_line_is_the_cause(stderr: str, expected: str | None) -> None:
    assert telling_line(stderr.splitlines()) == expected


def test_the_spark_engines_worker_gone_names_the_cause(tmp_path: Path) -> None:
    crash = tmp_path / "crash.py"
    crash.write_text(f"import sys\nsys.stderr.write({NODE_MISSING!r})\nsys.exit(1)\n")
    worker = WorkerProcess([sys.executable, str(crash)], dict(os.environ), None, "enrich#1")
    try:
        deadline = time.monotonic() + 20
        while worker.proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        gone = worker.gone("exited with requests unanswered")
    finally:
        worker.kill()
    assert gone.detail == "enrich#1 exited with requests unanswered: Error: Cannot find module 'etlstage-worker'"


NODE_PIPELINE = """
    stages:
      - {name: src, type: E, command: ["{PY}", "{TW}", count, "3"]}
      - {name: shout, type: T, command: [node, shout.js]}
      - {name: sink, type: L, command: ["{PY}", "{TW}", append, out.txt]}
"""


@pytest.mark.slow  # node under load may take its restarts (over 10 s)
def test_a_missing_node_module_is_the_runs_headline(pdir) -> None:
    if shutil.which("node") is None:
        pytest.skip("node is not installed")
    (pdir.path / "shout.js").write_text("const { runTransformer } = require('etlstage-worker');\n")
    pdir.write(textwrap.dedent(NODE_PIPELINE))
    r = pdir.run("--once", timeout=60)
    assert r.code == 1, r.stderr
    headline = r.stderr.split("pipeline failed: ", 1)[1].splitlines()[0]
    # node may die before its first request is written (stopped at once) or after (stopped
    # when its tries run out, on a loaded machine): either way the headline names the cause
    assert headline.endswith("Error: Cannot find module 'etlstage-worker'"), headline
    assert "Node.js v" not in headline


def test_a_crash_after_answers_has_its_cause_in_the_restart_line(pdir, tmp_path) -> None:
    flag = tmp_path / "crashed-once"
    script = tmp_path / "crash_once.py"
    frames = "".join(f"        print('    at frame{i} (enrich.js:{i}:1)', file=sys.stderr)\n" for i in range(30))
    script.write_text(
        "import os, sys\n"
        f"FLAG = {str(flag)!r}\n"
        "eom = bytes.fromhex(os.environ['ETLSTAGE_EOM']); eop = bytes.fromhex(os.environ['ETLSTAGE_EOP'])\n"
        "for n, line in enumerate(sys.stdin.buffer, 1):\n"
        "    if n == 3 and not os.path.exists(FLAG):\n"
        "        open(FLAG, 'w').close(); print('TypeError: row.id is undefined', file=sys.stderr)\n"
        f"{frames}"
        "        print('Node.js v20.20.2', file=sys.stderr); sys.exit(3)\n"
        "    sys.stdout.buffer.write(line.rstrip(eom) + eom + eop); sys.stdout.buffer.flush()\n"
    )
    pdir.write(f"""
        stages:
          - {{name: src, type: E, command: ["{{PY}}", "{{TW}}", count, "10"]}}
          - {{name: t, type: T, prefetch: 1, restart: {{backoff: 0.05}}, command: ["{{PY}}", "{script}"]}}
          - {{name: sink, type: L, command: ["{{PY}}", "{{TW}}", append, out.txt]}}
    """)
    r = pdir.run("--once", "--log-level", "WARNING", timeout=60)
    assert r.code == 0, r.stderr
    assert "t failed (t exited with requests unanswered: TypeError: row.id is undefined)" in r.stderr, r.stderr
