"""Fixtures for the Python end-to-end tests of tickd.

Run by `cargo test --test polyglot` (tests/polyglot.rs), which starts a real server and
passes its address in TICKD_ADDR. The stubs are generated here, at test time, from
proto/tickd/v1/tickd.proto into a temporary directory: nothing generated is committed.
"""

import importlib
import importlib.resources
import os
import pathlib
import sys
import uuid

import grpc
import pytest
from grpc_tools import protoc

REPO = pathlib.Path(__file__).resolve().parents[2]
PROTO_DIR = pathlib.Path(os.environ.get("TICKD_PROTO_DIR", REPO / "proto"))
PROTO_FILE = "tickd/v1/tickd.proto"

# Deadline, in seconds, of every unary call and of each whole Subscribe stream, so a
# broken server fails the test instead of hanging it.
RPC_TIMEOUT = 10


def _generate_stubs(out_dir: pathlib.Path):
    # google/protobuf/*.proto (duration, timestamp) ship inside grpc_tools.
    well_known = importlib.resources.files("grpc_tools") / "_proto"
    code = protoc.main(
        [
            "grpc_tools.protoc",
            f"-I{PROTO_DIR}",
            f"-I{well_known}",
            f"--python_out={out_dir}",
            f"--grpc_python_out={out_dir}",
            str(PROTO_DIR / PROTO_FILE),
        ]
    )
    if code != 0:
        raise RuntimeError(f"grpc_tools.protoc failed ({code}) on {PROTO_DIR / PROTO_FILE}")
    # The generated grpc module imports `tickd.v1.tickd_pb2`, so the output directory
    # goes on sys.path (tickd/ and tickd/v1/ are namespace packages).
    sys.path.insert(0, str(out_dir))
    importlib.invalidate_caches()
    pb2 = importlib.import_module("tickd.v1.tickd_pb2")
    pb2_grpc = importlib.import_module("tickd.v1.tickd_pb2_grpc")
    return pb2, pb2_grpc


@pytest.fixture(scope="session")
def stubs(tmp_path_factory):
    """(tickd_pb2, tickd_pb2_grpc), freshly generated from the proto."""
    return _generate_stubs(tmp_path_factory.mktemp("tickd-stubs"))


@pytest.fixture(scope="session")
def pb(stubs):
    return stubs[0]


@pytest.fixture(scope="session")
def addr():
    value = os.environ.get("TICKD_ADDR")
    if not value:
        pytest.fail("TICKD_ADDR is not set; run these tests with `cargo test --test polyglot`")
    return value


@pytest.fixture(scope="session")
def channel(addr):
    # Never route the loopback connection through an http(s)_proxy from the environment.
    with grpc.insecure_channel(addr, options=[("grpc.enable_http_proxy", 0)]) as channel:
        grpc.channel_ready_future(channel).result(timeout=RPC_TIMEOUT)
        yield channel


@pytest.fixture(scope="session")
def stub(stubs, channel):
    return stubs[1].TimersStub(channel)


@pytest.fixture
def namespace(request):
    """A namespace of the test's own, so tests never see each other's timers."""
    return f"py-{request.node.name[:40]}-{uuid.uuid4().hex[:12]}"
