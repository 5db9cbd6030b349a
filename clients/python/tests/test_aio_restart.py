"""The asyncio subscriber and retries across a restart of a durable tickd (the asyncio lease
keeper's restart test is in test_aio.py)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from dataclasses import replace

import grpc
import pytest
import pytest_asyncio

import tickd
from tickd.aio import AsyncClient
from conftest import TEST_CLIENT_OPTIONS, StartTickd
from held_handler import unsent_ack_logged
from recording_retry import RecordingRetryPolicy
from tickd_server import TickdServer
from waiting import PATIENCE


@pytest_asyncio.fixture
async def aio_client(tickd_server: TickdServer, namespace: str) -> AsyncIterator[AsyncClient]:
    policy = RecordingRetryPolicy(max_attempts=100, backoff=tickd.BackoffPolicy(initial=0.1, maximum=0.5))
    RecordingRetryPolicy.retried.clear()
    client = AsyncClient(tickd_server.address, replace(TEST_CLIENT_OPTIONS, namespace=namespace, retry=policy))
    yield client
    await client.close()


@pytest.mark.asyncio
async def test_subscriber_acknowledges_everything_across_a_restart(
    aio_client: AsyncClient, tickd_server: TickdServer
) -> None:
    acknowledged: set[str] = set()
    changed = asyncio.Event()

    async def handle(expiration: tickd.pb.Expiration) -> None:
        pass  # acknowledged by the subscriber once this returns

    def on_ack(expiration: tickd.pb.Expiration, was_acknowledged: bool) -> None:
        if was_acknowledged:
            acknowledged.add(expiration.timer.key)
            changed.set()

    async def wait_acknowledged(keys: set[str]) -> None:
        async def until_all() -> None:
            while not keys <= acknowledged:
                changed.clear()
                await changed.wait()

        await asyncio.wait_for(until_all(), PATIENCE)

    subscriber = aio_client.subscribe(handle, tickd.SubscriberOptions(ack_timeout=5.0), on_ack=on_ack)
    try:
        before = {f"before-{n}" for n in range(3)}
        for key in before:
            await aio_client.register(tickd.TimerSpec(key=key, delay=0.1))
        await wait_acknowledged(before)
        across = {f"across-{n}" for n in range(3)}
        for key in across:
            await aio_client.register(tickd.TimerSpec(key=key, delay=4.0))

        await asyncio.to_thread(tickd_server.restart)
        after = {f"after-{n}" for n in range(3)}
        for key in after:
            await aio_client.register(tickd.TimerSpec(key=key, delay=0.1))

        await wait_acknowledged(before | across | after)
        while (page := await aio_client.pending_page()).count or page.dead_count:
            await asyncio.sleep(0.05)  # tickd's counts are seen only by asking
    finally:
        await subscriber.stop()


@pytest.mark.asyncio
@pytest.mark.parametrize("signal", ["SIGTERM", "SIGKILL"])
async def test_a_handler_finishing_after_a_restart_is_not_acknowledged_and_its_expiration_comes_again(
    start_tickd: StartTickd, namespace: str, caplog: pytest.LogCaptureFixture, signal: str
) -> None:
    """The asyncio subscriber: a handler still running across a restart of tickd finishes
    once the subscriber reconnected; its ack is not sent, the expiration comes again with
    attempt 2 or more, and the expirations registered after the restart (their handlers
    held meanwhile) are each acknowledged by their own ack."""
    server = await asyncio.to_thread(start_tickd, "--sync", "always")
    client = AsyncClient(server.address, replace(TEST_CLIENT_OPTIONS, namespace=namespace))
    delivered: list[tickd.pb.Expiration] = []
    acks: list[tuple[tickd.pb.Expiration, bool]] = []
    changed = asyncio.Event()
    release_held = asyncio.Event()
    release_others = asyncio.Event()

    async def handle(expiration: tickd.pb.Expiration) -> None:
        first_of_held = expiration.timer.key == "held" and not of("held")
        delivered.append(expiration)
        changed.set()
        await (release_held if first_of_held else release_others).wait()

    def on_ack(expiration: tickd.pb.Expiration, acknowledged: bool) -> None:
        acks.append((expiration, acknowledged))
        changed.set()

    def of(key: str) -> list[tickd.pb.Expiration]:
        return [expiration for expiration in delivered if expiration.timer.key == key]

    def ack_of(expiration: tickd.pb.Expiration) -> list[bool]:
        return [acknowledged for acked, acknowledged in acks if acked is expiration]

    async def until(condition: Callable[[], bool]) -> None:
        async def loop() -> None:
            while not condition():
                changed.clear()
                await changed.wait()

        await asyncio.wait_for(loop(), PATIENCE)

    subscriber = client.subscribe(handle, tickd.SubscriberOptions(max_in_flight=8, ack_timeout=60.0), on_ack=on_ack)
    try:
        await client.register(tickd.TimerSpec(key="held", delay=0))
        await until(lambda: len(of("held")) == 1)
        first = of("held")[0]

        await asyncio.to_thread(server.restart if signal == "SIGTERM" else server.restart_after_sigkill)
        after = [f"after-{n}" for n in range(3)]
        for key in after:
            await client.register(tickd.TimerSpec(key=key, delay=0))
        await until(lambda: len(of("held")) >= 2 and all(of(key) for key in after))

        release_held.set()
        await until(lambda: bool(ack_of(first)))
        assert ack_of(first) == [False], "the late handler's ack counted as acknowledged"
        assert unsent_ack_logged(caplog, first.delivery_id, "tickd.aio.subscriber")
        release_others.set()
        again = of("held")[1]
        others = [again, *(of(key)[0] for key in after)]
        await until(lambda: all(ack_of(expiration) for expiration in others))
        assert [ack_of(expiration) for expiration in others] == [[True]] * len(others)
        while (page := await client.pending_page()).count or page.dead_count:
            await asyncio.sleep(0.05)  # tickd's counts are seen only by asking
        assert again.attempt >= 2, f"attempts did not survive the {signal} restart: attempt {again.attempt}"
        assert again.delivery_id != first.delivery_id, "a delivery id repeated across the restart"
    finally:
        release_held.set()
        release_others.set()
        await subscriber.stop()
        await client.close()


@pytest.mark.asyncio
async def test_keyed_registration_is_retried_and_keyless_is_not(
    aio_client: AsyncClient, tickd_server: TickdServer
) -> None:
    assert (await aio_client.register(tickd.TimerSpec(key="warm-up", delay=3600))).created
    assert await asyncio.to_thread(tickd_server.stop) == 0

    with pytest.raises(tickd.TickdError) as refused:
        await aio_client.register(tickd.TimerSpec(delay=3600))
    assert refused.value.code == grpc.StatusCode.UNAVAILABLE
    assert not RecordingRetryPolicy.retried.is_set()

    keyed = asyncio.get_running_loop().create_task(aio_client.register(tickd.TimerSpec(key="retried", delay=3600), timeout=PATIENCE))
    assert await asyncio.to_thread(RecordingRetryPolicy.retried.wait, PATIENCE), "no retry while tickd was down"
    await asyncio.to_thread(tickd_server.start)
    registered = await asyncio.wait_for(keyed, PATIENCE)
    assert registered.created and (await aio_client.get(key="retried")).id == registered.timer.id


@pytest.mark.asyncio
async def test_the_timeout_bounds_the_whole_retried_call(tickd_server: TickdServer, namespace: str) -> None:
    """A retry budget far longer than the timeout: the call still ends once its timeout passed."""
    endless = tickd.RetryPolicy(max_attempts=1_000_000, backoff=tickd.BackoffPolicy(initial=0.01, maximum=0.05))
    client = AsyncClient(tickd_server.address, replace(TEST_CLIENT_OPTIONS, namespace=namespace, retry=endless))
    try:
        assert await asyncio.to_thread(tickd_server.stop) == 0
        with pytest.raises(tickd.TickdError) as refused:
            # Without the overall deadline: a million attempts, hours.
            await asyncio.wait_for(client.get(key="absent", timeout=1.0), PATIENCE)
        assert refused.value.code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)
    finally:
        await client.close()
