"""Push sinks through the client (tickd.v1.Sinks), against a real tickd pushing to a real
HTTP receiver started here: set, pushed to, listed with the URL's credentials masked,
paused (nothing pushed, while another namespace's sink is), resumed, removed."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import grpc
import pytest

import tickd
from conftest import Connect, StartTickd
from waiting import PATIENCE


class Receiver:
    """An HTTP server on 127.0.0.1 answering 200 to every POST, recording (path, timer key,
    attempt) for each: the body is the expiration in proto3 JSON."""

    def __init__(self) -> None:
        self.condition = threading.Condition()
        self.pushes: list[tuple[str, str, int]] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))))
                push = (self.path, body["timer"]["key"], int(self.headers["Tickd-Attempt"]))
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()
                with receiver.condition:
                    receiver.pushes.append(push)
                    receiver.condition.notify_all()

            def log_message(self, format: str, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def keys(self, path: str) -> list[str]:
        with self.condition:
            return [key for pushed_path, key, _ in self.pushes if pushed_path == path]

    def wait_for(self, path: str, keys: set[str]) -> None:
        def arrived() -> bool:
            return keys <= {key for pushed_path, key, _ in self.pushes if pushed_path == path}

        with self.condition:
            if not self.condition.wait_for(arrived, PATIENCE):
                raise AssertionError(f"timed out waiting for pushes of {sorted(keys)} to {path}: {self.pushes}")

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    receiver = Receiver()
    yield receiver
    receiver.close()


def register_soon(client: tickd.Client, namespace: str, keys: list[str], delay: float) -> None:
    for key in keys:
        client.register(tickd.TimerSpec(namespace=namespace, key=key, delay=delay))


def test_a_sink_pushes_lists_pauses_resumes_and_is_removed(
    start_tickd: StartTickd, connect: Connect, receiver: Receiver, namespace: str
) -> None:
    server = start_tickd("--sink-allow", "127.0.0.1")
    client = connect(server, namespace=namespace)
    control = f"{namespace}-control"
    url = f"http://user:secret@127.0.0.1:{receiver.port}/paused"

    set_answer = client.set_sink(url, rate="50/s,burst=10")
    assert set_answer.changed and set_answer.sink.namespace == namespace
    assert set_answer.sink.url == f"http://***@127.0.0.1:{receiver.port}/paused"
    assert set_answer.sink.rate == "50/s,burst=10"
    assert set_answer.sink.origin == tickd.sinks_pb.SINK_ORIGIN_API
    assert not client.set_sink(url, rate="50/s,burst=10").changed  # what a retry would meet
    client.set_sink(f"http://127.0.0.1:{receiver.port}/control", namespace=control)

    register_soon(client, namespace, ["first", "second", "third"], 0.05)
    receiver.wait_for("/paused", {"first", "second", "third"})
    assert sorted(receiver.keys("/paused")) == ["first", "second", "third"]

    listed = {sink.namespace: sink for sink in client.list_sinks()}
    assert listed[namespace].url == f"http://***@127.0.0.1:{receiver.port}/paused"
    assert listed[control].url == f"http://127.0.0.1:{receiver.port}/control"

    paused = client.pause_sink()
    assert paused.changed and paused.sink.paused
    assert not client.pause_sink().changed
    assert client.get_sink().paused
    # Due before the control's timer: once it is pushed, these have fired too, and wait.
    register_soon(client, namespace, ["held-1", "held-2"], 0.05)
    register_soon(client, control, ["later"], 0.5)
    receiver.wait_for("/control", {"later"})
    assert sorted(receiver.keys("/paused")) == ["first", "second", "third"]
    (state,) = client.sink_status()
    assert state.sink.paused and state.delivered == 3
    assert {s.sink.namespace for s in client.sink_status(all_sinks=True)} >= {namespace, control}

    resumed = client.resume_sink()
    assert resumed.changed and not resumed.sink.paused
    receiver.wait_for("/paused", {"held-1", "held-2"})
    assert sorted(receiver.keys("/paused")) == ["first", "held-1", "held-2", "second", "third"]

    client.remove_sink()
    with pytest.raises(tickd.TickdError) as missing:
        client.get_sink()
    assert missing.value.code == grpc.StatusCode.NOT_FOUND
    assert namespace not in {sink.namespace for sink in client.list_sinks()}


def test_secrets_sign_pushes_until_cleared(start_tickd: StartTickd, connect: Connect, namespace: str) -> None:
    client = connect(start_tickd(), namespace=namespace)
    url = "http://127.0.0.1:9/unused"
    assert client.set_sink(url, secrets=["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"]).sink.signed
    assert client.set_sink(url, rate="5/s").sink.signed  # no secrets given: the old ones stay
    assert not client.set_sink(url, clear_secrets=True).sink.signed


def test_a_rate_tickd_cannot_read_is_invalid_argument_naming_rate(client: tickd.Client) -> None:
    with pytest.raises(tickd.TickdError) as refused:
        client.set_sink("http://127.0.0.1:9/x", rate="fast")
    assert refused.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert "rate" in refused.value.message
