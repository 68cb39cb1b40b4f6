"""One rule for hiding secrets wherever etlstage echoes a command, a URL or an error.

A value is hidden (written ``***``) when

- its key looks secret: it holds ``password``, ``passwd``, ``secret``, ``token``,
  ``credential`` or ``api key``, or is a ``sasl.*`` or ``ssl.key*`` property, in any of
  the spellings a command line uses (``sasl.password=…``, ``--sasl-password …``,
  ``KAFKA_SASL_PASSWORD=…``, ``-Dfs.s3a.secret.key=…``);
- it is the user information of a URL (``https://user:pw@host`` → ``https://***@host``).

Both engines, the logs, ``state.db``'s ``run_ends``, ``etlstage status`` and the status
page echo what this module returns, never the text it was given.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

HIDDEN = "***"

# after lower-casing and reading '_' and '-' as '.': kafka.sasl.password, fs.s3a.secret.key
_SECRET_KEY = re.compile(r"pass(word|wd)|secret|token|credential|api\.?key|private\.?key|(^|\.)sasl\.|(^|\.)ssl\.key")
_USERINFO = re.compile(r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.-]*://)(?P<userinfo>[^/?#@\s]+)@")
_KEY = re.compile(r"-*[A-Za-z0-9_.\-]+")
_KEY_EQ = re.compile(r"([A-Za-z0-9_.\-]+)=")
_VALUE = re.compile(r"[^\s'\",;&|)]*")  # in a longer text a value ends at a space, quote or separator


def secret_key(key: str) -> bool:
    """Whether a setting named ``key`` holds a secret (``sasl.password``, ``--api-token``)."""
    return bool(_SECRET_KEY.search(key.strip().lstrip("-").lower().replace("_", ".").replace("-", ".")))


def redact_url(text: str) -> str:
    """``text`` with the user information of every URL in it hidden."""
    return _USERINFO.sub(lambda m: f"{m['scheme']}{HIDDEN}@", text)


def redact_text(text: str) -> str:
    """``text`` (a message, a script) with URL user information and secret ``KEY=VALUE`` values hidden."""
    text = redact_url(text)
    parts, pos = [], 0
    for m in _KEY_EQ.finditer(text):  # --config=sasl.password=x: each key in turn
        end = _VALUE.match(text, m.end())
        if m.start() >= pos and end and end.end() > m.end() and secret_key(m[1]):
            parts += [text[pos : m.end()], HIDDEN]
            pos = end.end()
    return "".join([*parts, text[pos:]])


def _hidden_pair(arg: str) -> str | None:
    """``arg`` (``KEY=VALUE``, ``--opt=KEY=VALUE``) with all after its first secret key hidden, or None."""
    segments = arg.split("=")
    for i, segment in enumerate(segments[:-1]):
        if not _KEY.fullmatch(segment):
            return None
        if secret_key(segment):
            return "=".join(segments[: i + 1]) + "=" + HIDDEN  # the whole rest: a password may hold spaces
    return None


def redact_argv(argv: Sequence[str]) -> list[str]:
    """A command's arguments as they may be shown: a secret ``KEY=VALUE`` argument keeps its
    key, the value after a secret-looking option (``--password VALUE``) is hidden, and
    every other argument goes through :func:`redact_text`."""
    out: list[str] = []
    hide_next = False
    for arg in map(str, argv):
        pair = _hidden_pair(arg)
        if hide_next:
            out.append(HIDDEN)
            hide_next = False
        elif pair is not None:
            out.append(pair)
        elif arg.startswith("-") and "=" not in arg and secret_key(arg):
            out.append(arg)
            hide_next = True
        else:
            out.append(redact_text(arg))
    return out
