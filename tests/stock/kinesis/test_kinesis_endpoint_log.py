"""The extractor logs the endpoint it calls and where that came from: an emulator never passes for AWS."""

from __future__ import annotations

import logging

import pytest
from etlstage_workers.kinesis.client import make_client


@pytest.fixture(autouse=True)
def no_endpoint_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_KINESIS", "AWS_PROFILE", "AWS_CONFIG_FILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")


def logged(caplog: pytest.LogCaptureFixture, endpoint: str | None = None) -> str:
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="etlstage.kinesis"):
        make_client("s", "us-east-1", endpoint, None)
    return caplog.text


def test_an_emulator_from_the_environment_is_named(caplog, monkeypatch):
    # what the demo's emulator service exports into every stage's environment
    monkeypatch.setenv("AWS_ENDPOINT_URL_KINESIS", "http://127.0.0.1:4568")
    assert "endpoint http://127.0.0.1:4568 (from AWS_ENDPOINT_URL_KINESIS)" in logged(caplog)
    assert "AWS default" not in caplog.text


def test_a_given_endpoint_and_the_aws_one(caplog):
    assert "endpoint http://127.0.0.1:9 (given)" in logged(caplog, "http://127.0.0.1:9")
    assert "endpoint https://kinesis.us-east-1.amazonaws.com (the region's AWS endpoint)" in logged(caplog)
