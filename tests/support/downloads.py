"""What some tests download, fetched once into a cache: kinesis-local (npm) for the
resharding tests, the amazon-kclpy sdist for the KCL adapter tests, Apache Kafka's
broker jars (Maven) for the Kafka tests and Spark's Kafka connector when pyspark is there,
and then too the Delta Lake and S3A jars (Maven) for the Spark loader's table tests;
last, the class data archives the suite's JVMs map (tests/support/cds_warmup.py).

Standard library only, so that ``.ci/run`` fills the caches before the tests start:
``python tests/support/downloads.py`` (with the project's venv python: it has pip).
The tests call the same functions and find the caches filled.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
from pathlib import Path

KCLPY_VERSION = "3.2.0"
KINESIS_LOCAL_VERSION = "0.6.2"


def kclpy_cache() -> Path:
    return Path(os.environ.get("ETLSTAGE_KCLPY_CACHE") or Path.home() / ".cache" / "etlstage-kclpy")


def kinesis_local_base() -> Path:
    return Path(os.environ.get("ETLSTAGE_KINESIS_LOCAL_DIR") or Path.home() / ".cache/etlstage/kinesis-local")


def fetch_kclpy() -> Path:
    """A folder holding the unmodified ``amazon_kclpy/`` package (and ``samples/``) from its
    PyPI sdist (its build step downloads jars, so it is not installed: the folder goes on
    PYTHONPATH). Raises RuntimeError when it cannot be downloaded."""
    cache = kclpy_cache()
    target = cache / f"amazon_kclpy-{KCLPY_VERSION}"
    if (target / "amazon_kclpy" / "kcl.py").exists() and (target / "samples" / "sample_kclpy_app.py").exists():
        return target
    cache.mkdir(parents=True, exist_ok=True)
    sdist = cache / f"amazon_kclpy-{KCLPY_VERSION}.tar.gz"
    if not sdist.exists():
        _download_sdist("amazon-kclpy", sdist)
    with tarfile.open(sdist) as tar:
        wanted = tuple(f"amazon_kclpy-{KCLPY_VERSION}/{folder}/" for folder in ("amazon_kclpy", "samples"))
        members = [m for m in tar.getmembers() if m.name.startswith(wanted) and _plain(m)]
        if hasattr(tarfile, "data_filter"):  # Python 3.11.4 and later
            tar.extractall(cache, members=members, filter="data")
        else:  # Debian 12's 3.11.2: the members are checked by _plain instead
            tar.extractall(cache, members=members)
    return target


def _plain(member: tarfile.TarInfo) -> bool:
    """A file or folder that stays inside the folder it is unpacked into (no link, device,
    absolute path or ``..``): what ``filter="data"`` allows, for Pythons without it."""
    parts = Path(member.name).parts
    return (member.isfile() or member.isdir()) and not member.name.startswith("/") and ".." not in parts


PYPI_SIMPLE = os.environ.get("ETLSTAGE_PYPI_SIMPLE", "https://pypi.org/simple")


def _download_sdist(project: str, dest: Path) -> None:
    """``dest.name`` from the package index's simple page, its sha256 checked.

    Not ``pip download``: for an sdist pip prepares the package's metadata, which runs its
    build (amazon-kclpy's fetches jars from Maven) and took minutes on a loaded machine."""
    import hashlib
    import re
    import urllib.request

    try:
        with urllib.request.urlopen(f"{PYPI_SIMPLE}/{project}/", timeout=60) as page:
            html = page.read().decode()
        found = re.search(r'href="([^"#]*/' + re.escape(dest.name) + r')#sha256=([0-9a-f]{64})"', html)
        if found is None:
            raise RuntimeError(f"{PYPI_SIMPLE}/{project}/ lists no {dest.name}")
        url, digest = found.groups()
        with urllib.request.urlopen(url, timeout=120) as response:
            data = response.read()
    except OSError as exc:
        raise RuntimeError(f"cannot download {dest.name} from {PYPI_SIMPLE}: {exc}") from exc
    if hashlib.sha256(data).hexdigest() != digest:
        raise RuntimeError(f"{dest.name} from {url} does not match the index's sha256 {digest}")
    part = dest.with_name(dest.name + ".part")
    part.write_bytes(data)
    part.replace(dest)


def fetch_kinesis_local() -> Path:
    """kinesis-local's package folder, installed with npm on first use. Raises RuntimeError
    when npm cannot install it."""
    base = kinesis_local_base()
    pkg = base / "node_modules" / "kinesis-local"
    if not (pkg / "main.js").exists():
        base.mkdir(parents=True, exist_ok=True)
        done = subprocess.run(
            [
                "npm",
                "install",
                "--prefix",
                str(base),
                "--no-audit",
                "--no-fund",
                f"kinesis-local@{KINESIS_LOCAL_VERSION}",
            ],
            capture_output=True,
            text=True,
            timeout=300,
        )
        if done.returncode != 0 or not (pkg / "main.js").exists():
            raise RuntimeError(f"could not install kinesis-local with npm into {base}:\n{done.stdout}\n{done.stderr}")
    return pkg


def fetch_kafka_jars() -> str:
    """Apache Kafka's broker jars; Spark's Kafka connector too once pyspark is installed
    (its version follows pyspark's). The cache is :mod:`etlstage.spark.setup.jars`' own."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from etlstage.spark.setup import jars  # standard library only, like this file

    try:
        sets = ["kafka-broker", "kafka-spark"] if _has("pyspark") else ["kafka-broker"]
        return ", ".join(f"{name}: {len(jars.fetch_named(name))} jars" for name in sets)
    except jars.JarFetchError as exc:
        raise RuntimeError(str(exc)) from exc


def fetch_lake_jars() -> str:
    """Delta Lake and the S3A connector, once pyspark is installed (both follow its Spark and
    Hadoop versions)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from etlstage.spark.setup import jars

    if not _has("pyspark"):
        return "pyspark not installed yet: nothing to fetch"
    try:
        return ", ".join(f"{name}: {len(jars.fetch_named(name))} jars" for name in ("delta", "s3"))
    except jars.JarFetchError as exc:
        raise RuntimeError(str(exc)) from exc


def _has(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


def main() -> int:
    for fetch in (fetch_kclpy, fetch_kinesis_local, fetch_kafka_jars, fetch_lake_jars):
        try:
            print(f"{fetch.__name__}: {fetch()}")
        except (RuntimeError, OSError, subprocess.SubprocessError) as exc:
            print(f"{fetch.__name__}: {exc}", file=sys.stderr)
            return 1
    if _has("pyspark"):  # an optimisation: the tests run without the archives, only slower
        sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
        from tests.support.cds_warmup import record_suite_archives

        try:
            print(f"record_suite_archives: {record_suite_archives()}")
        except (RuntimeError, OSError, subprocess.SubprocessError) as exc:
            print(f"record_suite_archives (the tests run without): {exc}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
