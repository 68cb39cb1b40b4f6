"""Run a piece of Python against the loader's Delta code (workers/spark/lake.py) in a
process of its own: the Delta jars and SQL extension are set at session start.

The script gets ``lake``, ``LoaderConfig``, ``prepare``, ``rdss``, ``json``, ``sys``,
``threading``, ``out`` (the output root), ``config`` (RDSS into Delta at ``out``) and
``spark`` (a local session with the Delta jars), and prints its result as JSON last.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.support.paths import ROOT

PREAMBLE = """
import json, sys, threading
from etlstage_workers.spark import lake
from etlstage_workers.spark.config import LoaderConfig
from etlstage_workers.spark.extract import prepare
from etlstage.spark.setup.spark_session import start_session
from tests.support.spark_msgs import rdss

out = sys.argv[1]
config = LoaderConfig(output=out, format="delta", rdss=True).check()
conf = {**lake.session_conf(config), "spark.ui.enabled": "false"}
spark = start_session(sys.argv[2], "lake-test", conf, connect_timeout=10, log_level="ERROR")
"""


def run_lake_script(body: str, out: Path, master: str = "local[1]") -> Any:
    """``body`` after the preamble, in a new Python; the JSON of its last line of output."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run(
        [sys.executable, "-c", PREAMBLE + body + "\nspark.stop()\n", str(out), master],
        capture_output=True, text=True, timeout=500, env=env, cwd=out.parent,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])
