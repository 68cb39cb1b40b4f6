"""One redaction rule (etlstage/redact.py) for every place a command or URL is echoed."""

from __future__ import annotations

import pytest

from etlstage.redact import redact_argv, redact_text, redact_url, secret_key


@pytest.mark.parametrize(
    "key",
    [
        "sasl.password",
        "sasl.username",
        "sasl.oauthbearer.client.secret",
        "ssl.key.password",
        "ssl.keystore.password",
        "ssl.key.pem",
        "KAFKA_SASL_PASSWORD",
        "--sasl-password",
        "-Dspark.hadoop.fs.s3a.secret.key",
        "aws_session_token",
        "--api-key",
        "DB_PASSWD",
    ],
)
def test_secret_looking_keys(key: str) -> None:
    assert secret_key(key)


@pytest.mark.parametrize(
    "key", ["bootstrap.servers", "security.protocol", "ssl.ca.location", "--topic", "group.id", "batch.size"]
)
def test_ordinary_keys(key: str) -> None:
    assert not secret_key(key)


def test_a_command_keeps_its_shape_and_loses_its_secrets() -> None:
    argv = [
        "etlstage-kafka",
        "--config",
        "sasl.password=kafka PW777",  # the whole value, spaces and all
        "--config=ssl.key.password=k3y",
        "--config",
        "security.protocol=SASL_SSL",
        "--password",
        "hunter2",
        "--url",
        "https://bob:urlPW888@host:8443/path?x=1",
        "-X",
        "sasl.username=bob",
        "--topic",
        "t",
    ]
    shown = redact_argv(argv)
    assert shown == [
        "etlstage-kafka",
        "--config",
        "sasl.password=***",
        "--config=ssl.key.password=***",
        "--config",
        "security.protocol=SASL_SSL",
        "--password",
        "***",
        "--url",
        "https://***@host:8443/path?x=1",
        "-X",
        "sasl.username=***",
        "--topic",
        "t",
    ]
    assert redact_argv(shown) == shown  # hiding twice changes nothing


def test_secrets_inside_a_script_or_message_are_hidden() -> None:
    script = 'KAFKA_SASL_PASSWORD=pw1 exec worker --x "token=pw2" s3://AKIA:pw3@bucket/k; echo rows=3'
    assert redact_text(script) == ('KAFKA_SASL_PASSWORD=*** exec worker --x "token=***" s3://***@bucket/k; echo rows=3')
    assert redact_url("push to http://u:p@gw:9091 failed; see http://gw2/") == (
        "push to http://***@gw:9091 failed; see http://gw2/"
    )
