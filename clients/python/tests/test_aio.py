"""The asyncio client, its subscriber and its lease keeper (tasks), against a real tickd."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from pathlib import Path

import grpc
import pytest
import pytest_asyncio

import tickd
from tickd.aio import AsyncClient
from conftest import TEST_CLIENT_OPTIONS, StartTickd
from tickd_server import TickdServer
from waiting import PATIENCE

HOUR = 3600.0
#: The ttl of the lease that expires while tickd is down.
SHORT_TTL = 3.0


@pytest_asyncio.fixture
async def aio_client(tickd_server: TickdServer, namespace: str) -> AsyncIterator[AsyncClient]:
    client = AsyncClient(tickd_server.address, replace(TEST_CLIENT_OPTIONS, namespace=namespace))
    yield client
    await client.close()


async def wait_until(condition: asyncio.Condition, predicate: object, what: str) -> None:
    async with condition:
        try:
            await asyncio.wait_for(condition.wait_for(predicate), PATIENCE)  # type: ignore[arg-type]
        except asyncio.TimeoutError:
            raise AssertionError(f"timed out waiting for {what}") from None


@pytest.mark.asyncio
async def test_the_api_round_trips(aio_client: AsyncClient) -> None:
    results = await aio_client.register_batch([
        tickd.TimerSpec(key=f"page-{n}", delay=HOUR, payload=b"%d" % n) for n in range(7)
    ] + [tickd.TimerSpec(key="bad", delay=HOUR, repeat=60, cron="@daily")])
    assert all(isinstance(result, tickd.pb.NewTimeoutResponse) for result in results[:7])
    assert isinstance(results[7], tickd.TickdError) and results[7].code == grpc.StatusCode.INVALID_ARGUMENT

    keys = [timer.key async for timer in aio_client.pending(page_size=3)]
    assert sorted(keys) == sorted(f"page-{n}" for n in range(7))
    assert (await aio_client.get(key="page-3")).payload == b"3"

    moved = await aio_client.reschedule(key="page-3", delay=2 * HOUR, payload=b"moved")
    assert (await aio_client.get(moved.id)).payload == b"moved"
    assert await aio_client.cancel(key="page-3") is True
    with pytest.raises(tickd.TickdError) as gone:
        await aio_client.get(key="page-3")
    assert gone.value.code == grpc.StatusCode.NOT_FOUND

    lease = (await aio_client.register(tickd.TimerSpec(ttl=30.0))).timer
    assert (await aio_client.touch(lease.id, ttl=60.0)).ttl.ToSeconds() == 60
    assert (await aio_client.redrive()).redriven == 0
    page = await aio_client.pending_page(include_dead=True)
    assert page.count == 7 and page.dead_count == 0


@pytest.mark.asyncio
async def test_subscriber_limits_handlers_acks_and_stops_cleanly(aio_client: AsyncClient) -> None:
    limit = 2
    condition = asyncio.Condition()
    gate = asyncio.Event()
    state = {"running": 0, "most": 0}
    acknowledged: set[str] = set()

    async def handler(expiration: tickd.pb.Expiration) -> None:
        async with condition:
            state["running"] += 1
            state["most"] = max(state["most"], state["running"])
            condition.notify_all()
        await gate.wait()
        async with condition:
            state["running"] -= 1

    def on_ack(expiration: tickd.pb.Expiration, was_acknowledged: bool) -> None:
        if was_acknowledged:
            acknowledged.add(expiration.timer.key)

        async def notify() -> None:
            async with condition:
                condition.notify_all()

        asyncio.get_running_loop().create_task(notify())

    subscriber = aio_client.subscribe(handler, tickd.SubscriberOptions(max_in_flight=limit, ack_timeout=60.0),
                                      on_ack=on_ack)
    keys = {f"async-{n}" for n in range(6)}
    for key in keys:
        await aio_client.register(tickd.TimerSpec(key=key, delay=0))
    await wait_until(condition, lambda: state["running"] == limit, "the limit of running handlers")
    gate.set()
    await wait_until(condition, lambda: keys <= acknowledged, "every ack")
    assert state["most"] == limit

    await subscriber.stop()
    assert not subscriber.running
    page = await aio_client.pending_page()
    assert page.count == 0 and page.dead_count == 0


@pytest.mark.asyncio
async def test_manual_ack(aio_client: AsyncClient) -> None:
    received: asyncio.Queue[tickd.pb.Expiration] = asyncio.Queue()
    subscriber = aio_client.subscribe(received.put, tickd.SubscriberOptions(manual_ack=True, ack_timeout=60.0))
    try:
        await aio_client.register(tickd.TimerSpec(key="by-hand", delay=0))
        expiration = await asyncio.wait_for(received.get(), PATIENCE)
        assert expiration.timer.key == "by-hand" and expiration.attempt == 1
        assert await subscriber.ack(expiration) is True
    finally:
        await subscriber.stop()


@pytest.mark.asyncio
async def test_lease_keeper_across_a_restart(aio_client: AsyncClient, tickd_server: TickdServer) -> None:
    lost: asyncio.Queue[tickd.LostLease] = asyncio.Queue()
    keeper = aio_client.lease_keeper(on_lost=lost.put_nowait)
    try:
        kept = (await aio_client.register(tickd.TimerSpec(key="kept", ttl=120.0))).timer
        short = (await aio_client.register(tickd.TimerSpec(key="short", ttl=SHORT_TTL))).timer
        keeper.add_timer(kept)
        keeper.add_timer(short)
        while keeper.deadline(short.id) is None or keeper.deadline(kept.id) is None:
            await asyncio.sleep(0.05)  # polling the keeper's state: there is no event for a heartbeat
        assert await asyncio.to_thread(tickd_server.stop) == 0
        exited_at = datetime.now(timezone.utc)
        kept_before, short_deadline = keeper.deadline(kept.id), keeper.deadline(short.id)
        assert kept_before is not None and short_deadline is not None
        # Wall-clock time passes the latest deadline the short lease can have while tickd is
        # down: an unanswered heartbeat may have been applied (before tickd exited), so the
        # last answered deadline is not enough.
        latest_possible_deadline = max(short_deadline, exited_at + timedelta(seconds=SHORT_TTL))
        while datetime.now(timezone.utc) <= latest_possible_deadline:
            await asyncio.sleep(0.1)
        await asyncio.to_thread(tickd_server.start)

        report = await asyncio.wait_for(lost.get(), PATIENCE)
        assert report.lease.timer_id == short.id and report.error.code == grpc.StatusCode.NOT_FOUND
        while (keeper.deadline(kept.id) or kept_before) <= kept_before:
            await asyncio.sleep(0.05)
        assert lost.empty() and [lease.timer_id for lease in keeper.leases()] == [kept.id]
    finally:
        await keeper.stop()


@pytest.mark.asyncio
async def test_a_subscriber_and_a_lease_keeper_with_a_wrong_token_end_with_the_refusal(
    start_tickd: StartTickd, tmp_path: Path, namespace: str
) -> None:
    """Reconnecting cannot cure UNAUTHENTICATED: both tasks end and report it."""
    tokens = tmp_path / "tokens"
    tokens.write_text(f"right-token {namespace}\n")
    server = await asyncio.to_thread(start_tickd, "--auth-token-file", str(tokens))
    client = AsyncClient(server.address, replace(TEST_CLIENT_OPTIONS, namespace=namespace, token="wrong-token"))

    async def ignore(expiration: tickd.pb.Expiration) -> None:
        pass

    subscriber = client.subscribe(ignore)
    keeper = client.lease_keeper()
    try:
        for helper in (subscriber, keeper):
            with pytest.raises(tickd.TickdError) as refused:
                await asyncio.wait_for(helper.wait(), PATIENCE)
            assert refused.value.code == grpc.StatusCode.UNAUTHENTICATED
            assert helper.error is refused.value
            assert not helper.running  # it ended by itself, without stop()
    finally:
        await subscriber.stop()
        await keeper.stop()
        await client.close()


@pytest.mark.asyncio
async def test_the_sink_calls_awaited(aio_client: AsyncClient, namespace: str) -> None:
    url = "http://user:secret@127.0.0.1:9/unused"
    set_answer = await aio_client.set_sink(url, rate="5/s")
    assert set_answer.changed and set_answer.sink.url == "http://***@127.0.0.1:9/unused"
    assert (await aio_client.get_sink()).rate == "5/s,burst=1"  # answered with its burst spelled out
    assert namespace in {sink.namespace for sink in await aio_client.list_sinks()}
    assert (await aio_client.pause_sink()).sink.paused
    (state,) = await aio_client.sink_status()
    assert state.sink.paused and state.sink.namespace == namespace
    assert namespace in {each.sink.namespace for each in await aio_client.sink_status(all_sinks=True)}
    assert not (await aio_client.resume_sink()).sink.paused
    await aio_client.remove_sink()
    with pytest.raises(tickd.TickdError) as missing:
        await aio_client.get_sink()
    assert missing.value.code == grpc.StatusCode.NOT_FOUND
    with pytest.raises(tickd.TickdError) as refused:
        await aio_client.set_sink(url, rate="fast")
    assert refused.value.code == grpc.StatusCode.INVALID_ARGUMENT and "rate" in refused.value.message
