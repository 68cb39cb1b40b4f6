"""The Python SDK: a worker whose code fails still sends the answers it completed before
(the supervisor then sends only the failed request again), never a part of the failed
one — as the Node.js, Go, Rust and Java SDKs do."""

from __future__ import annotations

import io

import pytest

from etlstage.errors import MarkerInMessage
from etlstage.worker import Transformer, serve

SINGLE = {"ETLSTAGE_TYPE": "T", "ETLSTAGE_MODE": "single"}


def run(worker: Transformer, data: bytes) -> tuple[BaseException, bytes]:
    out = io.BytesIO()
    with pytest.raises(Exception) as caught:
        serve(worker, stdin=io.BytesIO(data), stdout=out, env=SINGLE)
    return caught.value, out.getvalue()


class FailOnC(Transformer):
    def process(self, messages: list[bytes]) -> list[bytes]:
        if messages == [b"c"]:
            raise ValueError("cannot take c")
        return [messages[0], b"+"]


class MarkerOnC(Transformer):
    def process(self, messages: list[bytes]) -> list[bytes]:
        return [b"ok", b"bad\x00"] if messages == [b"c"] else messages


def test_a_failing_transformer_sends_the_answers_before_it_and_nothing_of_its_own() -> None:
    error, out = run(FailOnC(), b"a\nb\nc\nd\n")
    assert isinstance(error, ValueError)
    assert out == b"a\n+\n\x00b\n+\n\x00"


def test_a_result_holding_a_marker_sends_the_answers_before_its_own() -> None:
    error, out = run(MarkerOnC(), b"a\nb\nc\nd\n")
    assert isinstance(error, MarkerInMessage)
    assert out == b"a\n\x00b\n\x00"


def test_a_result_that_is_not_bytes_is_named() -> None:
    error, out = run(Transformer.__new__(type("Bad", (Transformer,), {"process": lambda self, m: [1]})), b"a\n")
    assert isinstance(error, TypeError) and "must be bytes, got int" in str(error)
    assert out == b""
