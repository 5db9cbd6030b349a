"""The blocking subscriber: its concurrency limit, manual acks, a clean stop, repeat firings."""

from __future__ import annotations

import queue
import threading
from dataclasses import replace

import pytest

import tickd
from conftest import TEST_CLIENT_OPTIONS, Connect
from held_handler import HeldHandler, unsent_ack_logged
from tcp_proxy import TcpProxy
from tickd_server import TickdServer
from waiting import PATIENCE, Recorder, eventually


class InFlightCounter:
    """Counts handlers running at once; each waits at the gate until the test opens it."""

    def __init__(self) -> None:
        self.condition = threading.Condition()
        self.running = 0
        self.most = 0
        self.gate = threading.Event()

    def handler(self, recorder: Recorder) -> tickd.Handler:
        def handle(expiration: tickd.pb.Expiration) -> None:
            with self.condition:
                self.running += 1
                self.most = max(self.most, self.running)
                self.condition.notify_all()
            try:
                assert self.gate.wait(PATIENCE)
            finally:
                with self.condition:
                    self.running -= 1
            recorder.record_handled(expiration.timer.key, expiration.attempt)

        return handle

    def wait_running(self, count: int) -> None:
        with self.condition:
            assert self.condition.wait_for(lambda: self.running == count, PATIENCE), f"{self.running} running"


def test_no_more_handlers_run_at_once_than_the_limit(client: tickd.Client) -> None:
    limit = 3
    counter = InFlightCounter()
    recorder = Recorder()
    subscriber = client.subscribe(
        counter.handler(recorder), tickd.SubscriberOptions(max_in_flight=limit, ack_timeout=60.0),
        on_ack=lambda expiration, acknowledged: recorder.record_ack(expiration.timer.key, acknowledged),
    )
    try:
        keys = {f"busy-{n}" for n in range(10)}
        for key in keys:
            client.register(tickd.TimerSpec(key=key, delay=0))
        counter.wait_running(limit)  # the limit is reached: the rest wait for a free handler
        counter.gate.set()
        recorder.wait_acknowledged(keys)
        assert counter.most == limit
        assert sorted(recorder.handled) == sorted(keys)
    finally:
        subscriber.stop()


def test_manual_ack_leaves_the_ack_to_the_caller(client: tickd.Client) -> None:
    received: queue.Queue[tickd.pb.Expiration] = queue.Queue()
    subscriber = client.subscribe(received.put, tickd.SubscriberOptions(manual_ack=True, ack_timeout=60.0))
    try:
        client.register(tickd.TimerSpec(key="manual", delay=0, payload=b"by hand"))
        expiration = received.get(timeout=PATIENCE)
        assert expiration.timer.key == "manual" and expiration.timer.payload == b"by hand"
        assert expiration.attempt == 1
        # The handler returned, and the delivery still awaits its ack: the caller's is the one.
        assert subscriber.ack(expiration) is True
        assert subscriber.ack(expiration) is False  # acknowledged already
        assert client.pending_page().dead_count == 0
    finally:
        subscriber.stop()


def test_stop_waits_for_running_handlers_and_their_acks(client: tickd.Client) -> None:
    started = threading.Event()
    release = threading.Event()
    finished = threading.Event()
    recorder = Recorder()

    def slow(expiration: tickd.pb.Expiration) -> None:
        started.set()
        assert release.wait(PATIENCE)
        finished.set()

    subscriber = client.subscribe(
        slow, tickd.SubscriberOptions(ack_timeout=60.0),
        on_ack=lambda expiration, acknowledged: recorder.record_ack(expiration.timer.key, acknowledged),
    )
    client.register(tickd.TimerSpec(key="slow", delay=0))
    assert started.wait(PATIENCE)
    handler_done_when_stop_returned: list[bool] = []

    def stop() -> None:
        subscriber.stop()
        handler_done_when_stop_returned.append(finished.is_set())

    stopper = threading.Thread(target=stop)
    stopper.start()
    eventually(lambda: subscriber.stopping, "stop() to begin")
    # stop() began while the handler is held: it must still be waiting for it.
    assert stopper.is_alive() and not handler_done_when_stop_returned
    release.set()
    stopper.join(PATIENCE)
    assert not stopper.is_alive()
    assert handler_done_when_stop_returned == [True]
    assert recorder.acknowledged == {"slow"}  # acknowledged before stop returned
    page = client.pending_page()
    assert page.count == 0 and page.dead_count == 0

    assert not subscriber.running  # its stream is closed, its threads gone


def test_a_repeating_timer_is_delivered_once_per_firing(client: tickd.Client) -> None:
    recorder = Recorder()
    subscriber = client.subscribe(
        lambda expiration: recorder.record_handled(expiration.timer.key, expiration.attempt),
        on_ack=lambda expiration, acknowledged: recorder.record_ack(expiration.timer.key, acknowledged),
    )
    try:
        timer = client.register(tickd.TimerSpec(key="tick", delay=0.05, repeat=0.2)).timer
        recorder.wait_for(lambda seen: seen.handled.count("tick") >= 3, "three firings of the repeating timer")
        assert client.cancel(timer.id)
        assert set(recorder.attempts["tick"]) == {1}  # each firing is a first delivery
    finally:
        subscriber.stop()


def test_the_reconnect_back_off_starts_over_once_tickd_accepted_a_stream(
    connect: Connect, tickd_server: TickdServer, namespace: str
) -> None:
    """Two breaks of streams tickd had accepted, with no delivery in between: the second
    reconnect waits the initial back-off again, not the (hours long) grown one."""
    proxy = TcpProxy(tickd_server.address)
    client = tickd.Client(proxy.address, replace(TEST_CLIENT_OPTIONS, namespace=namespace))
    hours_after_one_failure = tickd.BackoffPolicy(initial=0.05, maximum=1e6, multiplier=1e6, jitter=0)
    subscriber = client.subscribe(lambda expiration: None, tickd.SubscriberOptions(reconnect=hours_after_one_failure))
    try:
        for accepted in (1, 2, 3):
            eventually(lambda: subscriber.accepted_streams >= accepted, f"accepted stream {accepted}")
            proxy.cut()
    finally:
        subscriber.stop()
        client.close()
        proxy.close()


def test_a_handler_finishing_after_a_reconnect_gets_no_ack_and_its_expiration_comes_again(
    tickd_server: TickdServer, namespace: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The stream breaks (tickd stays up) while a handler runs: tickd takes the delivery back
    and sends it again on the new stream (attempt 2); the first handler, finishing after that,
    gets no ack, and the second delivery is acknowledged by its own."""
    proxy = TcpProxy(tickd_server.address)
    client = tickd.Client(proxy.address, replace(TEST_CLIENT_OPTIONS, namespace=namespace))
    handler = HeldHandler("held")
    subscriber = client.subscribe(
        handler.handle, tickd.SubscriberOptions(max_in_flight=4, ack_timeout=60.0), on_ack=handler.on_ack
    )
    try:
        client.register(tickd.TimerSpec(key="held", delay=0))
        handler.wait_for("the held handler to start", lambda seen: len(seen.deliveries_of("held")) == 1)
        first = handler.deliveries_of("held")[0]
        proxy.cut()
        handler.wait_for("the held expiration again, on the new stream", lambda seen: len(seen.deliveries_of("held")) >= 2)

        handler.release_held.set()
        assert handler.ack_of(first) is False, "the late handler's ack counted as acknowledged"
        assert unsent_ack_logged(caplog, first.delivery_id), "no warning that the late ack was not sent"
        handler.release_others.set()
        again = handler.deliveries_of("held")[1]
        assert handler.ack_of(again) is True
        assert (first.attempt, again.attempt) == (1, 2)
        assert again.delivery_id != first.delivery_id
        page = client.pending_page()
        assert page.count == 0 and page.dead_count == 0
    finally:
        handler.release_held.set()
        handler.release_others.set()
        subscriber.stop()
        client.close()
        proxy.close()
