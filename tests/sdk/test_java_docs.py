"""docs/sdk/java.md runs as written: its transformers (a `Transformer` and a
`BatchTransformer`) and JUnit test pass `mvn test` beside the SDK's own sources, and both
workers pass `etlstage check-worker` in every T mode."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from tests.sdk.test_sdk_docs import blocks, check_worker

ROOT = Path(__file__).resolve().parents[2]
JAVA = ROOT / "sdk" / "java"

pytestmark = pytest.mark.slow


def test_java_page(tmp_path: Path) -> None:
    worker, in_place, unit = blocks("java.md", "java")
    # a copy of the SDK's project with the page's two files added (the SDK's own vector
    # tests compile there but only the page's test runs)
    project = tmp_path / "java"
    shutil.copytree(JAVA / "src", project / "src")
    shutil.copy(JAVA / "pom.xml", project / "pom.xml")
    (project / "src" / "main" / "java" / "Shout.java").write_text(worker)
    (project / "src" / "main" / "java" / "ShoutInPlace.java").write_text(in_place)
    (project / "src" / "test" / "java" / "ShoutTest.java").write_text(unit)
    r = subprocess.run(
        ["mvn", "-q", "-B", "test", "-Dtest=ShoutTest", "-Dsurefire.failIfNoSpecifiedTests=false"],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert (project / "target" / "surefire-reports" / "TEST-ShoutTest.xml").exists()
    check_worker(tmp_path, "java", "-cp", str(project / "target" / "classes"), "Shout")
    check_worker(tmp_path, "java", "-cp", str(project / "target" / "classes"), "ShoutInPlace")
