"""The address the status page and ``/metrics`` listen on: ``http:`` in stages.yaml or ``--http``.

>>> parse_listen("127.0.0.1:9464")
('127.0.0.1', 9464)
>>> parse_listen(":0")
('127.0.0.1', 0)
>>> parse_listen(9464)
('127.0.0.1', 9464)
>>> parse_listen("[::1]:9464")
('::1', 9464)
>>> parse_listen("0.0.0.0:9464")
('0.0.0.0', 9464)
"""

from __future__ import annotations

import re

from etlstage.errors import ConfigError

LOOPBACK = "127.0.0.1"
_FORM = "expected HOST:PORT, :PORT or PORT (PORT 0-65535; 0 picks a free port), e.g. 127.0.0.1:9464"


def parse_listen(value: object, where: str = "http") -> tuple[str, int]:
    """``(host, port)`` from ``HOST:PORT``, ``[IPv6]:PORT``, ``:PORT`` or a bare port (loopback).

    Errors start with ``where`` (none when empty: the config loader adds the place itself).
    """
    at = f"{where}: " if where else ""
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise ConfigError([f"{at}{value!r} is not an address; {_FORM}"])
    text = str(value).strip()
    host, _, port_text = text.rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]  # [IPv6]:PORT
    elif ":" in host:
        host = "!"  # a bare IPv6 address needs brackets
    if not port_text.isdigit() or not re.fullmatch(r"[A-Za-z0-9.\-]*|[0-9A-Fa-f:.]+", host):
        raise ConfigError([f"{at}{value!r} is not an address; {_FORM}"])
    port = int(port_text)
    if port > 65535:
        raise ConfigError([f"{at}port {port} in {value!r} is out of range; {_FORM}"])
    return host or LOOPBACK, port
