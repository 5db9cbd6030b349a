"""End to end from Python: a grpcio client with stubs generated from the proto, against the
real tickd server started by tests/polyglot.rs."""

import time

import grpc
import pytest
from google.protobuf.duration_pb2 import Duration

from conftest import RPC_TIMEOUT


def millis(ms: int) -> Duration:
    duration = Duration()
    duration.FromMilliseconds(ms)
    return duration


def register(pb, stub, namespace: str, delay_ms: int, payload: bytes):
    spec = pb.TimerSpec(namespace=namespace, delay=millis(delay_ms), payload=payload)
    return stub.NewTimeout(pb.NewTimeoutRequest(timer=spec), timeout=RPC_TIMEOUT)


def by_id(pb, namespace: str, timer_id: str):
    return pb.TimerRef(namespace=namespace, id=timer_id)


def test_register_subscribe_receive_ack(pb, stub, namespace):
    payload = b"\x00hello from python\xff"
    delay_ms = 200

    stream = stub.Subscribe(
        pb.SubscribeRequest(
            namespace=namespace,
            mode=pb.SubscribeRequest.MODE_SHARED,
            ack_timeout=millis(30_000),
            max_unacked=10,
        ),
        timeout=RPC_TIMEOUT,
    )
    try:
        started = time.monotonic()
        registered = register(pb, stub, namespace, delay_ms, payload)
        assert registered.created
        timer = registered.timer
        assert isinstance(timer.id, str) and timer.id
        assert timer.namespace == namespace
        # Registration answers do not echo the payload (the caller has it).
        assert timer.payload == b""
        assert timer.HasField("deadline")

        # Blocks until the server sends the expiration (or the stream's deadline passes).
        response = next(stream)
        received = time.monotonic()
        assert response.HasField("expiration")
        expiration = response.expiration

        assert expiration.timer.id == timer.id
        assert expiration.timer.namespace == namespace
        assert expiration.timer.payload == payload
        assert expiration.attempt == 1
        assert expiration.delivery_id
        assert not expiration.late
        assert not expiration.lease
        # The server never fires early: not before the deadline it gave us, and not
        # before the delay has passed on our own (monotonic) clock either.
        assert expiration.HasField("fired_at")
        deadline_ns = timer.deadline.ToNanoseconds()
        assert expiration.timer.deadline.ToNanoseconds() == deadline_ns
        assert expiration.fired_at.ToNanoseconds() >= deadline_ns, (
            f"fired at {expiration.fired_at.ToJsonString()}, "
            f"before its deadline {timer.deadline.ToJsonString()}"
        )
        assert received - started >= delay_ms / 1000, (
            f"expiration arrived {received - started:.3f}s after registering a {delay_ms} ms timer"
        )

        ack = stub.Ack(
            pb.AckRequest(namespace=namespace, delivery_ids=[expiration.delivery_id]),
            timeout=RPC_TIMEOUT,
        )
        assert ack.acknowledged == 1
        assert list(ack.unknown) == []

        # Acknowledged means done: a second ack of the same delivery is refused as unknown.
        again = stub.Ack(
            pb.AckRequest(namespace=namespace, delivery_ids=[expiration.delivery_id]),
            timeout=RPC_TIMEOUT,
        )
        assert again.acknowledged == 0
        assert list(again.unknown) == [expiration.delivery_id]
    finally:
        stream.cancel()


def test_negative_delay_is_invalid_argument(pb, stub, namespace):
    with pytest.raises(grpc.RpcError) as caught:
        register(pb, stub, namespace, -5, b"never")
    error = caught.value
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT, error
    assert "delay" in error.details(), error.details()


def test_cancel_before_expiry_then_get_is_not_found(pb, stub, namespace):
    timer = register(pb, stub, namespace, 60_000, b"cancel me").timer

    # Pending before the cancel: Get finds it.
    found = stub.Get(pb.GetRequest(timer=by_id(pb, namespace, timer.id)), timeout=RPC_TIMEOUT)
    assert found.timer.id == timer.id
    assert found.timer.payload == b"cancel me"

    cancelled = stub.Cancel(
        pb.CancelRequest(timer=by_id(pb, namespace, timer.id)), timeout=RPC_TIMEOUT
    )
    assert cancelled.cancelled is True

    with pytest.raises(grpc.RpcError) as caught:
        stub.Get(pb.GetRequest(timer=by_id(pb, namespace, timer.id)), timeout=RPC_TIMEOUT)
    assert caught.value.code() == grpc.StatusCode.NOT_FOUND, caught.value

    # Cancelling again says it was no longer pending.
    again = stub.Cancel(
        pb.CancelRequest(timer=by_id(pb, namespace, timer.id)), timeout=RPC_TIMEOUT
    )
    assert again.cancelled is False
