#!/usr/bin/env python3
"""tickd from Python (grpcio): register timeouts, consume and acknowledge their expirations,
keep a heartbeat lease alive with KeepAlive, and register a cron timer, replace it under its
key, reschedule it and ask for dead expirations to be redriven.

    pip install -r clients/python/requirements.txt
    TICKD_ADDR=127.0.0.1:50051 python3 clients/python/tickd_example.py

The gRPC stubs are generated from proto/ into a temporary directory when the program starts
(grpc_tools.protoc): nothing generated is kept. Every step checks its result; the program
exits non-zero, naming what went wrong, if an expiration does not arrive or arrives wrong.
"""

import importlib
import importlib.resources
import os
import pathlib
import queue
import sys
import tempfile
import threading
import time
import uuid

import grpc
from google.protobuf.duration_pb2 import Duration
from google.protobuf.timestamp_pb2 import Timestamp
from grpc_tools import protoc

HERE = pathlib.Path(__file__).resolve().parent
PROTO_DIR = pathlib.Path(os.environ.get("TICKD_PROTO_DIR", HERE.parent.parent / "proto"))
ADDR = os.environ.get("TICKD_ADDR", "127.0.0.1:50051")
# Deadline of each unary call, and how long to wait for an expiration before giving up: only
# so that a broken server fails the example instead of hanging it.
PATIENCE = 30


class ExampleFailed(Exception):
    pass


def check(condition, what):
    if not condition:
        raise ExampleFailed(what)


def generate_stubs(out_dir):
    """Compiles tickd.proto into tickd_pb2 and tickd_pb2_grpc modules, and imports them."""
    well_known = importlib.resources.files("grpc_tools") / "_proto"  # duration, timestamp
    code = protoc.main([
        "grpc_tools.protoc",
        f"-I{PROTO_DIR}",
        f"-I{well_known}",
        f"--python_out={out_dir}",
        f"--grpc_python_out={out_dir}",
        str(PROTO_DIR / "tickd/v1/tickd.proto"),
    ])
    if code != 0:
        raise ExampleFailed(f"grpc_tools.protoc failed ({code}) on {PROTO_DIR}")
    sys.path.insert(0, str(out_dir))
    importlib.invalidate_caches()
    return (importlib.import_module("tickd.v1.tickd_pb2"),
            importlib.import_module("tickd.v1.tickd_pb2_grpc"))


def millis(pb, ms):
    duration = Duration()
    duration.FromMilliseconds(ms)
    return duration


class Subscription:
    """A sharing subscriber: expirations of the namespace arrive on a queue, read by a thread."""

    def __init__(self, pb, stub, namespace):
        self.queue = queue.Queue()
        self.call = stub.Subscribe(pb.SubscribeRequest(
            namespace=namespace,
            mode=pb.SubscribeRequest.MODE_SHARED,
            ack_timeout=millis(pb, 30_000),
        ))
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        try:
            for response in self.call:
                self.queue.put(response.expiration)
        except grpc.RpcError as error:
            if error.code() != grpc.StatusCode.CANCELLED:
                self.queue.put(error)

    def next(self, what):
        try:
            item = self.queue.get(timeout=PATIENCE)
        except queue.Empty:
            raise ExampleFailed(f"no expiration within {PATIENCE}s: {what}") from None
        if isinstance(item, Exception):
            raise ExampleFailed(f"subscription failed: {item}")
        return item

    def close(self):
        self.call.cancel()


def timeouts(pb, stub, namespace, subscription):
    """Registers timeouts (one cancelled), then takes and acknowledges each expiration."""
    registered = {}
    # The doomed timer is cancelled long before it is due.
    for name, delay in [("first", 100), ("second", 200), ("third", 300), ("doomed", 3_600_000)]:
        spec = pb.TimerSpec(namespace=namespace, key=f"order-{name}", delay=millis(pb, delay),
                            payload=f"close {name}".encode())
        answer = stub.NewTimeout(pb.NewTimeoutRequest(timer=spec), timeout=PATIENCE)
        check(answer.created, f"{name} was created")
        registered[name] = answer.timer

    # Registering the same key again returns the existing timer (safe retries).
    again = stub.NewTimeout(pb.NewTimeoutRequest(timer=pb.TimerSpec(
        namespace=namespace, key="order-doomed", delay=millis(pb, 3_600_000))), timeout=PATIENCE)
    check(not again.created and again.timer.id == registered["doomed"].id, "idempotent key")

    cancel = stub.Cancel(pb.CancelRequest(timer=pb.TimerRef(namespace=namespace, key="order-doomed")),
                         timeout=PATIENCE)
    check(cancel.cancelled, "the doomed timer was still pending when cancelled")

    # Expirations come in deadline order; the cancelled timer never comes.
    for name in ["first", "second", "third"]:
        expiration = subscription.next(name)
        timer = registered[name]
        check(expiration.timer.id == timer.id,
              f"expected {name} ({timer.id}), got {expiration.timer.key} ({expiration.timer.id})")
        check(expiration.timer.payload == f"close {name}".encode(), f"{name}'s payload")
        check(expiration.attempt == 1, f"{name}: first delivery")
        check(expiration.fired_at.ToNanoseconds() >= timer.deadline.ToNanoseconds(),
              f"{name} fired before its deadline")
        ack = stub.Ack(pb.AckRequest(namespace=namespace, delivery_ids=[expiration.delivery_id]),
                       timeout=PATIENCE)
        check(ack.acknowledged == 1 and not ack.unknown, f"{name} acknowledged")
        print(f"fired {name} (id {timer.id}), acknowledged")

    pending = stub.Pending(pb.PendingRequest(namespace=namespace), timeout=PATIENCE)
    check(pending.count == 0, f"nothing left pending, found {pending.count}")
    print("timeouts ok: 3 fired in deadline order and were acknowledged; the cancelled one never fired")


def lease(pb, stub, namespace, subscription):
    """A worker's lease: heartbeats over KeepAlive well within its ttl; once they stop, it expires."""
    ttl_ms = 2_000
    spec = pb.TimerSpec(namespace=namespace, key="worker-1", ttl=millis(pb, ttl_ms), payload=b"worker-1")
    lease_timer = stub.NewTimeout(pb.NewTimeoutRequest(timer=spec), timeout=PATIENCE).timer

    heartbeats = queue.Queue()

    def requests():
        while (heartbeat := heartbeats.get()) is not None:
            yield heartbeat

    answers = stub.KeepAlive(requests(), timeout=PATIENCE)
    last_deadline = lease_timer.deadline.ToNanoseconds()
    beats = 3
    try:
        for sequence in range(1, beats + 1):
            heartbeats.put(pb.KeepAliveRequest(
                timer=pb.TimerRef(namespace=namespace, id=lease_timer.id), sequence=sequence))
            answer = next(answers)
            check(not answer.HasField("error"), f"heartbeat {sequence} refused: {answer.error.message}")
            check(answer.sequence == sequence and answer.id == lease_timer.id, "answer matches heartbeat")
            deadline = answer.deadline.ToNanoseconds()
            check(deadline >= last_deadline, "each heartbeat pushes the deadline on")
            last_deadline = deadline
            time.sleep(ttl_ms / 10 / 1000)  # the heartbeat cadence, as a worker's would be
    finally:
        heartbeats.put(None)  # ends the request stream: no more heartbeats
    for _ in answers:  # the server ends its side once ours is done
        pass

    # The supervisor's side: the lease's expiration, once the ttl passes without heartbeats.
    expiration = subscription.next("the lease after its heartbeats stopped")
    check(expiration.timer.id == lease_timer.id, f"expected the lease, got {expiration.timer.id}")
    check(expiration.lease, "marked as a lease expiration")
    check(expiration.fired_at.ToNanoseconds() >= last_deadline, "not before the last heartbeat's deadline")
    ack = stub.Ack(pb.AckRequest(namespace=namespace, delivery_ids=[expiration.delivery_id]),
                   timeout=PATIENCE)
    check(ack.acknowledged == 1, "lease expiration acknowledged")
    print(f"lease ok: {beats} heartbeats kept it alive; it expired once they stopped")


def schedules(pb, stub, namespace):
    """A cron timer (09:00 on weekdays in Berlin), replaced under its key, then rescheduled;
    and Redrive, which finds nothing dead in a fresh namespace."""
    spec = pb.TimerSpec(namespace=namespace, key="standup", cron="0 9 * * MON-FRI",
                        time_zone="Europe/Berlin", payload=b"standup")
    answer = stub.NewTimeout(pb.NewTimeoutRequest(timer=spec), timeout=PATIENCE)
    cron_timer = answer.timer
    check(answer.created and cron_timer.cron == "0 9 * * MON-FRI"
          and cron_timer.time_zone == "Europe/Berlin", "the cron timer shows its schedule")
    check(cron_timer.deadline.ToNanoseconds() > time.time_ns(), "its next firing is ahead")

    # replace=True with the key: the pending timer is replaced whole, keeping its id.
    spec = pb.TimerSpec(namespace=namespace, key="standup", cron="30 9 * * MON-FRI",
                        time_zone="Europe/Berlin", replace=True)
    answer = stub.NewTimeout(pb.NewTimeoutRequest(timer=spec), timeout=PATIENCE)
    check(not answer.created and answer.replaced and answer.timer.id == cron_timer.id,
          "replaced under its key")
    check(answer.timer.cron == "30 9 * * MON-FRI", "the new schedule")

    # Reschedule moves this firing (the schedule carries on after it), with a new payload.
    new_deadline = Timestamp(seconds=1_893_488_400)  # 2030-01-01T09:00:00Z
    moved = stub.Reschedule(pb.RescheduleRequest(
        timer=pb.TimerRef(namespace=namespace, key="standup"), deadline=new_deadline,
        payload=b"moved"), timeout=PATIENCE).timer
    check(moved.deadline.seconds == new_deadline.seconds, "rescheduled to the new deadline")
    got = stub.Get(pb.GetRequest(timer=pb.TimerRef(namespace=namespace, id=moved.id)),
                   timeout=PATIENCE).timer
    check(got.payload == b"moved", "the new payload")
    stub.Cancel(pb.CancelRequest(timer=pb.TimerRef(namespace=namespace, id=moved.id)),
                timeout=PATIENCE)

    # Redrive: no ids means every dead expiration of the namespace (none here); ids that are
    # not dead expirations come back in not_dead.
    redrive = stub.Redrive(pb.RedriveRequest(namespace=namespace), timeout=PATIENCE)
    check(redrive.redriven == 0 and not redrive.not_dead, "nothing dead to redrive")
    redrive = stub.Redrive(pb.RedriveRequest(namespace=namespace, delivery_ids=["00000000000000ff"]),
                           timeout=PATIENCE)
    check(list(redrive.not_dead) == ["00000000000000ff"], "an unknown id is not dead")
    print("schedules ok: a cron timer was registered, replaced and rescheduled; redrive found nothing dead")


def main():
    with tempfile.TemporaryDirectory(prefix="tickd-stubs-") as stubs_dir:
        pb, pb_grpc = generate_stubs(stubs_dir)
        # Never route the connection through an http(s)_proxy from the environment.
        with grpc.insecure_channel(ADDR, options=[("grpc.enable_http_proxy", 0)]) as channel:
            try:
                grpc.channel_ready_future(channel).result(timeout=PATIENCE)
            except grpc.FutureTimeoutError:
                raise ExampleFailed(f"cannot reach tickd at {ADDR}") from None
            stub = pb_grpc.TimersStub(channel)
            namespace = f"python-example-{uuid.uuid4().hex[:8]}"
            subscription = Subscription(pb, stub, namespace)
            try:
                timeouts(pb, stub, namespace, subscription)
                lease(pb, stub, namespace, subscription)
                schedules(pb, stub, namespace)
            finally:
                subscription.close()
    print("all ok")


if __name__ == "__main__":
    try:
        main()
    except ExampleFailed as failure:
        print(f"FAILED: {failure}", file=sys.stderr)
        sys.exit(1)
    except grpc.RpcError as error:
        print(f"FAILED: {error.code().name}: {error.details()}", file=sys.stderr)
        sys.exit(1)
