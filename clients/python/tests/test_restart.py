"""Across a restart of a durable tickd: the subscriber, the lease keeper and retries."""

from __future__ import annotations

import threading
import uuid
from datetime import datetime, timedelta, timezone

import grpc
import pytest

import tickd
from conftest import Connect, StartTickd
from held_handler import HeldHandler, unsent_ack_logged
from recording_retry import RecordingRetryPolicy
from tickd_server import TickdServer
from waiting import PATIENCE, Recorder, eventually

#: The ttl of the lease that expires while tickd is down.
SHORT_TTL = 3.0


def register_keyed(client: tickd.Client, keys: list[str], delay: float) -> None:
    for key in keys:
        assert client.register(tickd.TimerSpec(key=key, delay=delay, payload=key.encode())).created


def test_subscriber_handles_and_acknowledges_everything_across_a_restart(
    client: tickd.Client, tickd_server: TickdServer
) -> None:
    recorder = Recorder()
    subscriber = client.subscribe(
        lambda expiration: recorder.record_handled(expiration.timer.key, expiration.attempt),
        tickd.SubscriberOptions(max_in_flight=4, ack_timeout=5.0),
        on_ack=lambda expiration, acknowledged: recorder.record_ack(expiration.timer.key, acknowledged),
    )
    try:
        before = [f"before-{n}" for n in range(3)]  # due before the restart
        register_keyed(client, before, delay=0.1)
        recorder.wait_acknowledged(set(before))
        across = [f"across-{n}" for n in range(3)]  # due once tickd is back (or fired late at start-up)
        register_keyed(client, across, delay=4.0)

        tickd_server.restart()
        after = [f"after-{n}" for n in range(3)]
        register_keyed(client, after, delay=0.1)

        recorder.wait_acknowledged(set(before + across + after))
        eventually(
            lambda: (page := client.pending_page()).count == 0 and page.dead_count == 0,
            "nothing pending or dead in the namespace",
        )
    finally:
        subscriber.stop()


@pytest.mark.parametrize("signal", ["SIGTERM", "SIGKILL"])
def test_a_handler_finishing_after_a_restart_is_not_acknowledged_and_its_expiration_comes_again(
    connect: Connect, start_tickd: StartTickd, namespace: str, caplog: pytest.LogCaptureFixture, signal: str
) -> None:
    """A handler still running when tickd is restarted (same data directory) finishes once the
    subscriber has reconnected: its ack is not sent (nor counted as acknowledged), the
    expiration comes again with attempt 2 or more, and no other expiration is settled in its
    place: the ones registered after the restart, held in their handlers meanwhile, are each
    acknowledged by their own ack."""
    server = start_tickd("--sync", "always")
    client = connect(server, namespace=namespace)
    handler = HeldHandler("held")
    subscriber = client.subscribe(
        handler.handle, tickd.SubscriberOptions(max_in_flight=8, ack_timeout=60.0), on_ack=handler.on_ack
    )
    try:
        client.register(tickd.TimerSpec(key="held", delay=0))
        handler.wait_for("the held handler to start", lambda seen: len(seen.deliveries_of("held")) == 1)
        first = handler.deliveries_of("held")[0]
        assert first.attempt == 1

        if signal == "SIGTERM":
            server.restart()
        else:
            server.restart_after_sigkill()
        after = [f"after-{n}" for n in range(3)]
        register_keyed(client, after, delay=0)
        # The held expiration again (on the new stream, so the subscriber reconnected) and the
        # new ones, all in their handlers: each of them awaits its own ack now.
        handler.wait_for(
            "the held expiration again and every later one",
            lambda seen: len(seen.deliveries_of("held")) >= 2 and all(seen.deliveries_of(key) for key in after),
        )

        handler.release_held.set()
        assert handler.ack_of(first) is False, "the late handler's ack counted as acknowledged"
        assert unsent_ack_logged(caplog, first.delivery_id), "no warning that the late ack was not sent"

        handler.release_others.set()
        again = handler.deliveries_of("held")[1]
        later = [handler.deliveries_of(key)[0] for key in after]
        for delivered in [again, *later]:
            assert handler.ack_of(delivered) is True, f"{delivered} was not acknowledged by its own ack"
        eventually(
            lambda: (page := client.pending_page()).count == 0 and page.dead_count == 0,
            "nothing pending or dead in the namespace",
        )
        assert again.attempt >= 2, f"attempts did not survive the {signal} restart: {again}"
        assert again.delivery_id != first.delivery_id, f"a delivery id repeated across the restart: {first}, {again}"
    finally:
        handler.release_held.set()
        handler.release_others.set()
        subscriber.stop()


def test_lease_keeper_keeps_the_long_lease_and_reports_the_expired_one_lost(
    client: tickd.Client, tickd_server: TickdServer
) -> None:
    lost: list[tickd.LostLease] = []
    lost_event = threading.Event()

    def on_lost(lease: tickd.LostLease) -> None:
        lost.append(lease)
        lost_event.set()

    long_lease = client.register(tickd.TimerSpec(key="long", ttl=120.0)).timer
    short_lease = client.register(tickd.TimerSpec(key="short", ttl=SHORT_TTL)).timer
    keeper = client.lease_keeper(on_lost=on_lost)
    try:
        keeper.add_timer(long_lease)
        keeper.add_timer(short_lease)
        # A few answered heartbeats of the short lease: it is being kept alive.
        first = eventually(lambda: keeper.deadline(short_lease.id), "the short lease's first heartbeat")
        eventually(lambda: (keeper.deadline(short_lease.id) or first) > first, "a later heartbeat")

        status = tickd_server.stop()
        assert status == 0
        exited_at = datetime.now(timezone.utc)
        long_deadline_before = keeper.deadline(long_lease.id)
        short_deadline = keeper.deadline(short_lease.id)
        assert long_deadline_before is not None and short_deadline is not None
        # While tickd is down, wall-clock time passes the latest deadline the short lease can
        # have: a heartbeat sent but never answered may have been applied, so its last answered
        # deadline is not enough; any heartbeat applied was applied before tickd exited.
        latest_possible_deadline = max(short_deadline, exited_at + timedelta(seconds=SHORT_TTL))
        eventually(lambda: datetime.now(timezone.utc) > latest_possible_deadline,
                   "the short lease's latest possible deadline to pass")
        tickd_server.start()

        assert lost_event.wait(90), "the short lease was not reported lost"
        eventually(
            lambda: (keeper.deadline(long_lease.id) or long_deadline_before) > long_deadline_before,
            "a heartbeat of the long lease after the restart",
        )
        assert [entry.lease.timer_id for entry in lost] == [short_lease.id]
        assert lost[0].error.code == grpc.StatusCode.NOT_FOUND
        assert lost[0].last_deadline == short_deadline
        assert keeper.leases() == [tickd.LeaseId(client.options.namespace, long_lease.id)]
        assert client.get(long_lease.id).id == long_lease.id
    finally:
        keeper.stop()


def test_keyed_registration_is_retried_until_tickd_is_back_and_keyless_is_not(
    connect: Connect, tickd_server: TickdServer, namespace: str
) -> None:
    policy = RecordingRetryPolicy(max_attempts=100, backoff=tickd.BackoffPolicy(initial=0.1, maximum=0.5))
    RecordingRetryPolicy.retried.clear()
    client = connect(tickd_server, namespace=namespace, retry=policy)
    assert client.register(tickd.TimerSpec(key="warm-up", delay=3600)).created  # connected once

    assert tickd_server.stop() == 0
    with pytest.raises(tickd.TickdError) as refused:
        client.register(tickd.TimerSpec(delay=3600))  # no key: one attempt only
    assert refused.value.code == grpc.StatusCode.UNAVAILABLE
    assert not RecordingRetryPolicy.retried.is_set()

    key = f"retried-{uuid.uuid4().hex[:8]}"
    outcome: list[tickd.pb.NewTimeoutResponse | BaseException] = []

    def register() -> None:
        try:
            outcome.append(client.register(tickd.TimerSpec(key=key, delay=3600), timeout=PATIENCE))
        except BaseException as error:  # handed to the test thread
            outcome.append(error)

    worker = threading.Thread(target=register)
    worker.start()
    assert RecordingRetryPolicy.retried.wait(60), "the keyed registration was not retried"
    tickd_server.start()
    worker.join(90)
    assert not worker.is_alive()
    assert isinstance(outcome[0], tickd.pb.NewTimeoutResponse), outcome
    assert outcome[0].created and outcome[0].timer.key == key
    assert client.get(key=key).id == outcome[0].timer.id  # registered exactly once, under its key


def test_the_timeout_bounds_the_whole_retried_call(
    connect: Connect, tickd_server: TickdServer, namespace: str
) -> None:
    """With a retry budget far longer than the timeout, the call still ends once its timeout
    passed: retries stay within the call's deadline (each attempt gets the time left)."""
    endless = tickd.RetryPolicy(max_attempts=1_000_000, backoff=tickd.BackoffPolicy(initial=0.01, maximum=0.05))
    client = connect(tickd_server, namespace=namespace, retry=endless)
    assert tickd_server.stop() == 0
    outcome: list[BaseException] = []

    def get() -> None:
        try:
            client.get(key="absent", timeout=1.0)
        except BaseException as error:  # handed to the test thread
            outcome.append(error)

    worker = threading.Thread(target=get, daemon=True)
    worker.start()
    worker.join(PATIENCE)  # without the overall deadline: a million attempts, hours
    assert not worker.is_alive(), "the retried call outlived its timeout"
    assert isinstance(outcome[0], tickd.TickdError), outcome
    assert outcome[0].code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)
