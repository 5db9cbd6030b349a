"""Bearer tokens and TLS (with and without client certificates)."""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest

import tickd
from certificates import Certificates, make_certificates
from conftest import Connect, StartTickd
from waiting import PATIENCE

HOUR = 3600.0


@pytest.fixture(scope="module")
def certificates(tmp_path_factory: pytest.TempPathFactory) -> Certificates:
    return make_certificates(tmp_path_factory.mktemp("certificates"))


def test_a_token_is_required_and_accepted(start_tickd: StartTickd, connect: Connect, tmp_path: Path, namespace: str) -> None:
    tokens = tmp_path / "tokens"
    tokens.write_text(f"right-token {namespace}\n")
    server = start_tickd("--auth-token-file", str(tokens))

    for options in ({}, {"token": "wrong-token"}):
        anonymous = connect(server, namespace=namespace, **options)
        with pytest.raises(tickd.TickdError) as refused:
            anonymous.register(tickd.TimerSpec(key="k", delay=HOUR))
        assert refused.value.code == grpc.StatusCode.UNAUTHENTICATED, options

    client = connect(server, namespace=namespace, token="right-token")
    registered = client.register(tickd.TimerSpec(key="k", delay=HOUR)).timer
    assert client.get(key="k").id == registered.id
    with pytest.raises(tickd.TickdError) as outside:
        client.get(key="k", namespace="someone-else")
    assert outside.value.code == grpc.StatusCode.PERMISSION_DENIED


def test_tls_with_the_ca(start_tickd: StartTickd, connect: Connect, certificates: Certificates, namespace: str) -> None:
    server = start_tickd("--tls-cert", str(certificates.server_cert), "--tls-key", str(certificates.server_key))
    client = connect(server, namespace=namespace, tls=tickd.TlsOptions(ca_file=certificates.ca))
    assert client.register(tickd.TimerSpec(key="secure", delay=HOUR)).created
    by_name = connect(server, namespace=namespace,
                      tls=tickd.TlsOptions(ca_file=certificates.ca, server_name="localhost"))
    assert by_name.get(key="secure").key == "secure"

    plaintext = connect(server, namespace=namespace, retry=tickd.RetryPolicy(max_attempts=1))
    with pytest.raises(tickd.TickdError) as refused:
        plaintext.get(key="secure")
    assert refused.value.code == grpc.StatusCode.UNAVAILABLE


def test_mutual_tls_needs_the_client_certificate(
    start_tickd: StartTickd, connect: Connect, certificates: Certificates, namespace: str
) -> None:
    server = start_tickd("--tls-cert", str(certificates.server_cert), "--tls-key", str(certificates.server_key),
                         "--tls-client-ca", str(certificates.ca))
    without_certificate = connect(server, namespace=namespace, retry=tickd.RetryPolicy(max_attempts=1),
                                  tls=tickd.TlsOptions(ca_file=certificates.ca))
    with pytest.raises(tickd.TickdError) as refused:
        without_certificate.register(tickd.TimerSpec(key="mtls", delay=HOUR))
    assert refused.value.code == grpc.StatusCode.UNAVAILABLE

    client = connect(server, namespace=namespace, tls=tickd.TlsOptions(
        ca_file=certificates.ca, cert_file=certificates.client_cert, key_file=certificates.client_key))
    assert client.register(tickd.TimerSpec(key="mtls", delay=HOUR)).created
    assert client.get(key="mtls").key == "mtls"


def test_a_subscriber_and_a_lease_keeper_with_a_wrong_token_end_with_the_refusal(
    start_tickd: StartTickd, connect: Connect, tmp_path: Path, namespace: str
) -> None:
    """Reconnecting cannot cure UNAUTHENTICATED: both end and report it instead of retrying forever."""
    tokens = tmp_path / "tokens"
    tokens.write_text(f"right-token {namespace}\n")
    server = start_tickd("--auth-token-file", str(tokens))
    client = connect(server, namespace=namespace, token="wrong-token")

    subscriber = client.subscribe(lambda expiration: None)
    keeper = client.lease_keeper()
    try:
        for helper in (subscriber, keeper):
            with pytest.raises(tickd.TickdError) as refused:
                helper.wait(PATIENCE)
            assert refused.value.code == grpc.StatusCode.UNAUTHENTICATED
            assert helper.error is refused.value
            assert not helper.running  # it ended by itself, without stop()
    finally:
        subscriber.stop()
        keeper.stop()
