"""The floor of any relay that sees every byte: E -> T -> L through one Python process that
only copies (bench/core_pipeline.py's "relay floor" row).

It starts the three commands itself, each with its own pipes to this process, and moves
E's stdout to T's stdin and T's stdout to L's stdin with what the supervisor uses at its
thinnest: 1 MiB pipes, reads of up to 1 MiB, non-blocking writes, one epoll loop. It
parses nothing, counts nothing, confirms nothing: the supervisor's time above this is
its own logic; this above the shell pipe is the price of two more copies through a
single process.

    relay_floor.py E_CMD T_CMD L_CMD     (each a shell command line)
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import selectors
import subprocess
import sys

CHUNK = 1 << 20
F_SETPIPE_SZ = 1031


def grow(fd: int) -> None:
    with contextlib.suppress(OSError):
        fcntl.fcntl(fd, F_SETPIPE_SZ, CHUNK)


def main() -> None:
    e_cmd, t_cmd, l_cmd = sys.argv[1:4]
    e = subprocess.Popen(e_cmd, shell=True, stdout=subprocess.PIPE)
    t = subprocess.Popen(t_cmd, shell=True, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    sink = subprocess.Popen(l_cmd, shell=True, stdin=subprocess.PIPE)
    assert e.stdout and t.stdin and t.stdout and sink.stdin
    hops = {e.stdout.fileno(): t.stdin.fileno(), t.stdout.fileno(): sink.stdin.fileno()}
    closers = {t.stdin.fileno(): t.stdin.close, sink.stdin.fileno(): sink.stdin.close}
    for src, dst in hops.items():
        grow(src)
        grow(dst)
        os.set_blocking(dst, False)
    pending: dict[int, memoryview] = {}  # per destination: what is still to be written
    sel = selectors.DefaultSelector()
    for src in hops:
        sel.register(src, selectors.EVENT_READ)
    open_sources = len(hops)
    while open_sources or pending:
        for key, _ in sel.select():
            fd = key.fd
            if fd in hops:  # a source is readable
                data = os.read(fd, CHUNK)
                dst = hops[fd]
                if not data:
                    sel.unregister(fd)
                    open_sources -= 1
                    closers[dst]()  # nothing waits for it: a source is not read while its rest is
                    continue
                written = _write(dst, memoryview(data))
                if written < len(data):  # the rest waits: stop reading this source meanwhile
                    pending[dst] = memoryview(data)[written:]
                    sel.unregister(fd)
                    sel.register(dst, selectors.EVENT_WRITE, fd)
            else:  # a destination can take more
                rest = pending[fd]
                written = _write(fd, rest)
                if written < len(rest):
                    pending[fd] = rest[written:]
                    continue
                del pending[fd]
                sel.unregister(fd)
                sel.register(key.data, selectors.EVENT_READ)  # its source, not at its end yet
    for proc in (e, t, sink):
        if proc.wait() != 0:
            sys.exit(f"{proc.args!r} exited with {proc.returncode}")


def _write(fd: int, data: memoryview) -> int:
    try:
        return os.write(fd, data)
    except BlockingIOError:
        return 0


if __name__ == "__main__":
    main()
