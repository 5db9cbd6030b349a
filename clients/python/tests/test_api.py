"""The whole API round-trips through the blocking client, against a real tickd."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import grpc
import pytest

import tickd
from conftest import Connect, StartTickd
from waiting import Recorder, eventually

HOUR = timedelta(hours=1)


def test_batch_registers_the_valid_items_and_reports_the_invalid_one(client: tickd.Client) -> None:
    results = client.register_batch([
        tickd.TimerSpec(key="first", delay=HOUR),
        tickd.TimerSpec(key="broken", cron="not a cron expression"),
        tickd.TimerSpec(delay=HOUR, payload=b"third"),
    ])
    assert len(results) == 3
    first, broken, third = results
    assert isinstance(first, tickd.pb.NewTimeoutResponse) and first.created and first.timer.key == "first"
    assert isinstance(third, tickd.pb.NewTimeoutResponse) and third.created and third.timer.id
    assert isinstance(broken, tickd.TickdError)
    assert broken.code == grpc.StatusCode.INVALID_ARGUMENT
    assert "cron" in broken.message
    assert client.get(third.timer.id).payload == b"third"  # registration answers carry no payload
    with pytest.raises(tickd.TickdError) as missing:
        client.get(key="broken")
    assert missing.value.code == grpc.StatusCode.NOT_FOUND


def test_a_known_key_returns_the_timer_and_replace_replaces_it(client: tickd.Client) -> None:
    original = client.register(tickd.TimerSpec(key="job", delay=HOUR, payload=b"v1"))
    again = client.register(tickd.TimerSpec(key="job", delay=2 * HOUR, payload=b"v2"))
    assert original.created and not again.created and not again.replaced
    assert again.timer.id == original.timer.id and client.get(key="job").payload == b"v1"

    replaced = client.register(tickd.TimerSpec(key="job", delay=2 * HOUR, payload=b"v2", replace=True))
    assert not replaced.created and replaced.replaced and replaced.timer.id == original.timer.id
    assert replaced.timer.deadline.ToDatetime() > original.timer.deadline.ToDatetime()
    assert client.get(key="job").payload == b"v2"


def test_cron_in_a_time_zone_and_repeat_and_ttl_are_kept(client: tickd.Client) -> None:
    cron = client.register(tickd.TimerSpec(key="standup", cron="0 9 * * MON-FRI", time_zone="Europe/Berlin")).timer
    assert cron.cron == "0 9 * * MON-FRI" and cron.time_zone == "Europe/Berlin"
    next_firing = cron.deadline.ToDatetime(tzinfo=timezone.utc)
    assert next_firing > datetime.now(timezone.utc)
    # 09:00 in Berlin is 08:00 UTC in winter (CET) and 07:00 UTC in summer (CEST).
    assert next_firing.hour in (7, 8) and next_firing.minute == 0
    assert next_firing.weekday() < 5

    repeating = client.register(tickd.TimerSpec(delay=HOUR, repeat=timedelta(minutes=5))).timer
    assert repeating.repeat.ToTimedelta() == timedelta(minutes=5)

    lease = client.register(tickd.TimerSpec(ttl=30.0)).timer
    assert lease.ttl.ToTimedelta() == timedelta(seconds=30)


def test_touch_pushes_a_lease_on_and_can_change_its_ttl(client: tickd.Client) -> None:
    lease = client.register(tickd.TimerSpec(key="worker", ttl=30.0)).timer
    touched = client.touch(lease.id)
    assert touched.deadline.ToDatetime() >= lease.deadline.ToDatetime()
    longer = client.touch(key="worker", ttl=timedelta(minutes=10))
    assert longer.ttl.ToTimedelta() == timedelta(minutes=10)
    assert longer.deadline.ToDatetime() > touched.deadline.ToDatetime()


def test_reschedule_with_and_without_a_payload(client: tickd.Client) -> None:
    timer = client.register(tickd.TimerSpec(key="report", delay=HOUR, payload=b"old")).timer
    moved = client.reschedule(timer.id, delay=2 * HOUR, payload=b"new")
    assert moved.id == timer.id and moved.deadline.ToDatetime() > timer.deadline.ToDatetime()
    assert client.get(timer.id).payload == b"new"

    at = datetime(2030, 1, 1, 9, 0, tzinfo=timezone.utc)
    moved_again = client.reschedule(key="report", deadline=at)
    assert moved_again.deadline.ToDatetime(tzinfo=timezone.utc) == at
    assert client.get(key="report").payload == b"new"  # no payload given: kept

    client.reschedule(key="report", deadline=at, payload=b"")
    assert client.get(key="report").payload == b""  # an empty payload is a payload


def test_get_and_cancel_by_id_and_by_key(client: tickd.Client) -> None:
    by_id = client.register(tickd.TimerSpec(delay=HOUR, payload=b"by id")).timer
    client.register(tickd.TimerSpec(key="by-key", delay=HOUR, payload=b"by key"))
    assert client.get(by_id.id).payload == b"by id"
    assert client.get(key="by-key").payload == b"by key"
    assert client.get(by_id.id).remaining.ToTimedelta() > timedelta(minutes=50)

    assert client.cancel(by_id.id) is True
    assert client.cancel(by_id.id) is False  # already cancelled: by id, an answer
    assert client.cancel(key="by-key") is True
    with pytest.raises(tickd.TickdError) as gone:
        client.cancel(key="by-key")  # by key, a timer no longer pending is NOT_FOUND
    assert gone.value.code == grpc.StatusCode.NOT_FOUND and "by-key" in gone.value.message
    with pytest.raises(ValueError):
        client.get()  # neither id nor key


def test_pending_is_iterated_lazily_page_by_page(client: tickd.Client) -> None:
    registered = {client.register(tickd.TimerSpec(key=f"p-{n}", delay=HOUR)).timer.id for n in range(13)}
    pages_fetched: list[int] = []
    fetch_page = client.pending_page

    def counting_pending_page(*args: object, **kwargs: object) -> tickd.pb.PendingResponse:
        page = fetch_page(*args, **kwargs)  # type: ignore[arg-type]
        pages_fetched.append(len(page.timers))
        return page

    client.pending_page = counting_pending_page  # type: ignore[method-assign]
    timers = client.pending(page_size=4)
    assert pages_fetched == []  # nothing asked before the iteration starts
    first = next(timers)
    assert len(pages_fetched) == 1 and first.id in registered
    seen = [first.id, *(timer.id for timer in timers)]
    assert sorted(seen) == sorted(registered)  # each exactly once
    assert len(pages_fetched) >= 4 and max(pages_fetched) <= 4
    assert client.pending_page().count == 13


def test_dead_expirations_are_listed_and_redriven(start_tickd: StartTickd, connect: Connect, namespace: str) -> None:
    server = start_tickd("--max-attempts", "2")
    client = connect(server, namespace=namespace)

    def refuse(expiration: tickd.pb.Expiration) -> None:
        raise RuntimeError("this handler never succeeds")

    failing = client.subscribe(refuse, tickd.SubscriberOptions(ack_timeout=0.2))
    timer = client.register(tickd.TimerSpec(key="doomed", delay=0, payload=b"doomed")).timer
    eventually(lambda: client.pending_page().dead_count == 1, "the expiration to go dead after 2 attempts")
    failing.stop()

    dead = client.dead_expirations()
    assert [expiration.timer.id for expiration in dead] == [timer.id]
    assert dead[0].attempt == 2 and dead[0].timer.payload == b"doomed"
    answer = client.redrive([dead[0].delivery_id, "00000000000000ff"])
    assert answer.redriven == 1 and list(answer.not_dead) == ["00000000000000ff"]
    assert client.pending_page().dead_count == 0

    recorder = Recorder()
    working = client.subscribe(
        lambda expiration: recorder.record_handled(expiration.timer.key, expiration.attempt),
        on_ack=lambda expiration, acknowledged: recorder.record_ack(expiration.timer.key, acknowledged),
    )
    try:
        recorder.wait_acknowledged({"doomed"})
        assert recorder.attempts["doomed"] == [1]  # attempts counted afresh
        assert client.redrive().redriven == 0
        page = client.pending_page(include_dead=True)
        assert page.count == 0 and page.dead_count == 0 and not page.dead_expirations
    finally:
        working.stop()


def test_errors_carry_the_code_and_a_message_naming_the_field(client: tickd.Client) -> None:
    with pytest.raises(tickd.TickdError) as both:
        client.register(tickd.TimerSpec(delay=HOUR, deadline=datetime.now(timezone.utc) + HOUR))
    assert both.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert "delay" in both.value.message and "deadline" in both.value.message
    with pytest.raises(tickd.TickdError) as zone:
        client.register(tickd.TimerSpec(cron="@daily", time_zone="Mars/Olympus_Mons"))
    assert zone.value.code == grpc.StatusCode.INVALID_ARGUMENT and "time_zone" in zone.value.message
    assert str(zone.value).startswith("INVALID_ARGUMENT: ")
