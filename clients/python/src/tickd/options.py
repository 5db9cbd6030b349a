"""How a client connects: address, TLS, token, default namespace, deadlines, retries."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import grpc

from .retry import RetryPolicy


@dataclass(frozen=True)
class TlsOptions:
    """TLS to tickd (``--tls-cert``): trust ``ca_file`` (PEM; None: the system's roots), and,
    when tickd asks for client certificates (``--tls-client-ca``), present ``cert_file`` with
    ``key_file``. ``server_name`` overrides the name checked against tickd's certificate."""

    ca_file: str | Path | None = None
    cert_file: str | Path | None = None
    key_file: str | Path | None = None
    server_name: str | None = None

    def __post_init__(self) -> None:
        if (self.cert_file is None) != (self.key_file is None):
            raise ValueError("TlsOptions: cert_file and key_file go together")

    def credentials(self) -> grpc.ChannelCredentials:
        def read(path: str | Path | None) -> bytes | None:
            return None if path is None else Path(path).read_bytes()

        return grpc.ssl_channel_credentials(
            root_certificates=read(self.ca_file),
            private_key=read(self.key_file),
            certificate_chain=read(self.cert_file),
        )


@dataclass(frozen=True)
class ClientOptions:
    """Everything a :class:`tickd.Client` or :class:`tickd.aio.AsyncClient` is configured with.

    - ``namespace``: used by every call that is given none ("" is tickd's default namespace).
    - ``token``: sent as ``authorization: Bearer TOKEN`` on every call (``--auth-token-file``).
    - ``tls``: None for plaintext.
    - ``timeout``: the deadline of each unary call attempt, in seconds (each method also takes
      ``timeout=``); streams have none, they run until stopped.
    - ``retry``: retries of idempotent calls on UNAVAILABLE.
    - ``reconnect_backoff_max``: the longest grpc waits between connection attempts once
      tickd is unreachable (grpc's default of 120 s would leave a restarted tickd unused for
      minutes); it bounds how soon retries and streams find tickd back.
    - ``keepalive_interval``: seconds between HTTP/2 pings on an open connection (None: none),
      so that a connection that died silently (a peer gone without closing it) breaks the
      subscriber's and the lease keeper's streams and they reconnect, instead of waiting forever.
    - ``channel_options``: extra grpc channel arguments, e.g. ``("grpc.enable_http_proxy", 0)``.
    """

    namespace: str = ""
    token: str | None = None
    tls: TlsOptions | None = None
    timeout: float | None = 10.0
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    reconnect_backoff_max: float = 2.0
    keepalive_interval: float | None = 30.0
    channel_options: tuple[tuple[str, str | int], ...] = ()

    def metadata(self) -> tuple[tuple[str, str], ...]:
        return (("authorization", f"Bearer {self.token}"),) if self.token else ()

    def grpc_channel_options(self) -> list[tuple[str, str | int]]:
        reconnect_ms = max(1, int(self.reconnect_backoff_max * 1000))
        options: list[tuple[str, str | int]] = [
            ("grpc.initial_reconnect_backoff_ms", min(reconnect_ms, 200)),
            ("grpc.max_reconnect_backoff_ms", reconnect_ms),
        ]
        if self.keepalive_interval is not None:
            options.append(("grpc.keepalive_time_ms", max(1, int(self.keepalive_interval * 1000))))
            options.append(("grpc.keepalive_timeout_ms", 10_000))
        if self.tls is not None and self.tls.server_name:
            options.append(("grpc.ssl_target_name_override", self.tls.server_name))
        options.extend(self.channel_options)
        return options
