"""Fixtures: a real tickd per test (from $TICKD_BIN), clients connected to it, a namespace."""

from __future__ import annotations

import os

# Before grpc is imported: the tests start tickd processes while grpc threads run, and grpc's
# fork handlers have no business in those children.
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")

import uuid
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path

import pytest

import tickd
from tickd_server import TickdServer

#: Options of every test client: no http(s)_proxy from the environment on loopback, and a
#: retry budget that outlasts a tickd restart on a loaded machine.
TEST_CLIENT_OPTIONS = tickd.ClientOptions(
    timeout=30.0,
    retry=tickd.RetryPolicy(max_attempts=40, backoff=tickd.BackoffPolicy(initial=0.1, maximum=1.0)),
    channel_options=(("grpc.enable_http_proxy", 0),),
)

StartTickd = Callable[..., TickdServer]
Connect = Callable[..., tickd.Client]


@pytest.fixture(scope="session")
def tickd_binary() -> str:
    binary = os.environ.get("TICKD_BIN")
    if not binary:
        pytest.fail("TICKD_BIN is not set: name the tickd binary to test against")
    if not os.access(binary, os.X_OK):
        pytest.fail(f"TICKD_BIN={binary} is not an executable file")
    return binary


@pytest.fixture
def start_tickd(tickd_binary: str, tmp_path: Path) -> Iterator[StartTickd]:
    """``start_tickd("--max-attempts", "2")``: a running tickd of this test, killed at teardown."""
    servers: list[TickdServer] = []
    pid_dir = Path(os.environ["TICKD_TEST_PID_DIR"]) if os.environ.get("TICKD_TEST_PID_DIR") else None

    def start(*extra_args: str) -> TickdServer:
        work_dir = tmp_path / f"tickd-{len(servers)}"
        work_dir.mkdir()
        server = TickdServer(tickd_binary, work_dir, list(extra_args), pid_dir)
        servers.append(server)
        server.start()
        return server

    yield start
    for server in servers:
        server.kill()


@pytest.fixture
def tickd_server(start_tickd: StartTickd) -> TickdServer:
    """A durable tickd with default settings."""
    return start_tickd()


@pytest.fixture
def connect() -> Iterator[Connect]:
    """``connect(server, token=..., tls=...)``: a blocking client with the test options."""
    clients: list[tickd.Client] = []

    def open_client(server: TickdServer, **options: object) -> tickd.Client:
        client = tickd.Client(server.address, replace(TEST_CLIENT_OPTIONS, **options))  # type: ignore[arg-type]
        clients.append(client)
        return client

    yield open_client
    for client in clients:
        client.close()


@pytest.fixture
def client(connect: Connect, tickd_server: TickdServer, namespace: str) -> tickd.Client:
    """A client of the default tickd whose default namespace is this test's own."""
    return connect(tickd_server, namespace=namespace)


@pytest.fixture
def namespace(request: pytest.FixtureRequest) -> str:
    """A namespace of the test's own."""
    return f"py-{request.node.name[:30]}-{uuid.uuid4().hex[:8]}"
