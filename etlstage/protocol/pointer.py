"""JSON pointers (RFC 6901): the one implementation the supervisor (``partition_by``)
and the stock workers share.

>>> parse_pointer("/messageHeader/messageId")
('messageHeader', 'messageId')
>>> parse_pointer("/a~1b/c~0d"), parse_pointer(""), parse_pointer("/")
(('a/b', 'c~d'), (), ('',))
>>> doc = {"a": {"b": [10, 20]}, "": 0}
>>> resolve(doc, parse_pointer("/a/b/1")), resolve(doc, parse_pointer("/")), resolve(doc, ()) is doc
(20, 0, True)
>>> resolve(doc, parse_pointer("/a/b/01")) is MISSING, resolve(doc, parse_pointer("/a/b/-")) is MISSING
(True, True)
>>> resolve(doc, parse_pointer("/a/b/1"), arrays=False) is MISSING
True
"""

from __future__ import annotations

MISSING = object()  # what a pointer to nothing resolves to (``None`` is JSON's null)


def parse_pointer(text: str) -> tuple[str, ...]:
    """The reference tokens of a pointer: ``""`` is the whole document, ``"/"`` the member
    named by the empty string."""
    if text == "":
        return ()
    if not text.startswith("/"):
        raise ValueError(f"JSON pointer {text!r}: must start with '/' (e.g. /messageHeader/messageId)")
    return tuple(part.replace("~1", "/").replace("~0", "~") for part in text[1:].split("/"))


def resolve(doc: object, tokens: tuple[str, ...], *, arrays: bool = True) -> object:
    """The value at ``tokens``, or :data:`MISSING`.  ``arrays=False``: tokens name object
    members only (an array is a value, as for a column taken from a document)."""
    node = doc
    for token in tokens:
        if isinstance(node, dict):
            if token not in node:
                return MISSING
            node = node[token]
        elif arrays and isinstance(node, list) and _index(token) < len(node):
            node = node[_index(token)]
        else:
            return MISSING
    return node


def _index(token: str) -> int:
    """An array index per RFC 6901 (no sign, no leading zero), else a number past any end."""
    if token.isdigit() and token.isascii() and (token == "0" or token[0] != "0"):
        return int(token)
    return 1 << 62


__all__ = ["MISSING", "parse_pointer", "resolve"]
