"""A worker that builds a big block every window reuses the memory the last one freed."""

from __future__ import annotations

import platform
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="mallopt's settings are glibc's")

# what the Kafka extractor does each window: 10,000 values of 1 KB, joined into one block
WINDOWS = textwrap.dedent(
    """
    import os, resource, sys
    {before}
    def window():
        values = [os.urandom(8) * 128 for _ in range(10_000)]
        return len(b"\\n".join(values))
    window()
    start = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(10):
        window()
    print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - start)
    """
)


def page_faults_of_ten_windows(before: str = "") -> int:
    code = WINDOWS.format(before=textwrap.dedent(before).strip())
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    return int(done.stdout.split()[-1])


def test_with_malloc_defaults_every_window_faults_its_memory_in_again():
    """The cost this module removes, shown: without it each window faults in ~20 MB."""
    assert page_faults_of_ten_windows() > 10 * 2_000


def test_keep_freed_memory_makes_the_next_windows_reuse_it():
    tuned = page_faults_of_ten_windows(
        """
        from etlstage.worker.memory import keep_freed_memory
        assert keep_freed_memory()
        """
    )
    assert tuned < 10 * 100, tuned


@pytest.mark.parametrize("worker", ["extractor", "loader"])
def test_the_kafka_workers_set_it_up_themselves(worker):
    """Their setup (no broker needed: the clients connect later) is what tunes malloc."""
    setup = {
        "extractor": """
            from etlstage_workers.kafka.extractor import KafkaExtractor
            from etlstage_workers.kafka.options import Options
            w = KafkaExtractor(Options(bootstrap="127.0.0.1:1", topics=["t"], group="g"))
            w.scenario = Scenario(type="E", mode="cyclic")
        """,
        "loader": """
            from etlstage_workers.kafka.loader import KafkaLoader
            from etlstage_workers.kafka.options import LoadOptions
            w = KafkaLoader(LoadOptions(bootstrap="127.0.0.1:1", topic="t"))
            w.scenario = Scenario(type="L", mode="batch", batch_size=10)
        """,
    }[worker]
    faults = page_faults_of_ten_windows(
        "from etlstage.protocol import Scenario\n" + textwrap.dedent(setup).strip() + "\nw.setup()"
    )
    assert faults < 10 * 100, faults
