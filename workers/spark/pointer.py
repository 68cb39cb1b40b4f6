"""JSON pointers (RFC 6901) over parsed documents.

>>> parse_pointer("/messageHeader/messageId")
('messageHeader', 'messageId')
>>> parse_pointer("/a~1b/c~0d")
('a/b', 'c~d')
>>> resolve({"a": {"b": 1}}, ("a", "b"))
1

Tokens name object members (array elements are not addressed: take the array itself,
as JSON text), the same rule the Spark schema built from the pointers follows.
"""

from __future__ import annotations

MISSING = object()


def parse_pointer(text: str) -> tuple[str, ...]:
    """The reference tokens of a pointer; ``""`` is the whole document."""
    if text == "":
        return ()
    if not text.startswith("/"):
        raise ValueError(f"JSON pointer {text!r}: must start with '/' (e.g. /messageHeader/messageId)")
    return tuple(part.replace("~1", "/").replace("~0", "~") for part in text[1:].split("/"))


def resolve(doc: object, tokens: tuple[str, ...]) -> object:
    """The value at ``tokens``, or :data:`MISSING` when the path does not exist."""
    node = doc
    for token in tokens:
        if isinstance(node, dict):
            if token not in node:
                return MISSING
            node = node[token]
        else:
            return MISSING
    return node
