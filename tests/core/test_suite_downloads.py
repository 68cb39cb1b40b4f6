"""The suite's download helper unpacks only plain files and folders from an sdist, on every
Python 3.11 (``filter="data"`` arrived in 3.11.4; Debian 12's python3 is 3.11.2)."""

from __future__ import annotations

import io
import tarfile

from tests.support.downloads import _plain


def _member(name: str, kind: bytes = tarfile.REGTYPE, link: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = link
    return info


def test_files_and_folders_inside_the_package_are_unpacked() -> None:
    assert _plain(_member("amazon_kclpy-3.2.0/amazon_kclpy/kcl.py"))
    assert _plain(_member("amazon_kclpy-3.2.0/samples", tarfile.DIRTYPE))


def test_links_devices_and_paths_that_leave_the_folder_are_not() -> None:
    assert not _plain(_member("amazon_kclpy-3.2.0/amazon_kclpy/x", tarfile.SYMTYPE, "/etc/passwd"))
    assert not _plain(_member("amazon_kclpy-3.2.0/amazon_kclpy/y", tarfile.LNKTYPE, "/etc/shadow"))
    assert not _plain(_member("amazon_kclpy-3.2.0/amazon_kclpy/dev", tarfile.CHRTYPE))
    assert not _plain(_member("amazon_kclpy-3.2.0/amazon_kclpy/../../escape.py"))
    assert not _plain(_member("/amazon_kclpy-3.2.0/amazon_kclpy/abs.py"))


def test_a_hostile_archive_unpacks_nothing_outside(tmp_path) -> None:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for info, data in [(_member("pkg/ok.py"), b"x = 1\n"), (_member("pkg/../../out.py"), b"bad\n")]:
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        tar.addfile(_member("pkg/link", tarfile.SYMTYPE, "/etc/passwd"))
    buf.seek(0)
    (tmp_path / "in").mkdir()
    with tarfile.open(fileobj=buf) as tar:
        tar.extractall(tmp_path / "in", members=[m for m in tar.getmembers() if _plain(m)])
    assert (tmp_path / "in/pkg/ok.py").read_bytes() == b"x = 1\n"
    assert not (tmp_path / "out.py").exists() and not (tmp_path / "in/pkg/link").exists()
