"""Tracing with OpenTelemetry (the SDK's in-memory exporter): a timer registered inside a
span is handled in a child of that span, across a SIGKILL restart of a durable tickd, and a
redelivery's span links to it instead; a reschedule inside a span makes that span the parent."""

from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass, replace

import pytest
from opentelemetry import baggage, context, trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import tickd
from tickd.aio import AsyncClient
from conftest import TEST_CLIENT_OPTIONS, Connect, StartTickd
from tickd_server import TickdServer
from waiting import PATIENCE

# The process's tracer provider can be set once: every test of this module shares it.
EXPORTER = InMemorySpanExporter()
_provider = TracerProvider()
_provider.add_span_processor(SimpleSpanProcessor(EXPORTER))
trace.set_tracer_provider(_provider)
TRACER = trace.get_tracer("tickd-tests")


@dataclass(frozen=True)
class Handled:
    key: str
    attempt: int
    carried: bool  # the expiration had a trace_context
    span: trace.SpanContext  # the handler's current span
    order: str | None  # the baggage entry "order", as the handler saw it


def handled(expiration: tickd.pb.Expiration) -> Handled:
    return Handled(
        expiration.timer.key, expiration.attempt, expiration.HasField("trace_context"),
        trace.get_current_span().get_span_context(), str(baggage.get_baggage("order") or "") or None,
    )


def handler_spans(namespace: str, key: str) -> dict[int, ReadableSpan]:
    """The finished handler spans of the timer ``key``, by attempt."""
    return {
        int(str(span.attributes["tickd.attempt"])): span
        for span in EXPORTER.get_finished_spans()
        if span.name == f"tickd.expiration {namespace}" and span.attributes is not None
        and span.attributes.get("tickd.timer.key") == key
    }


def test_the_handler_span_continues_the_registering_trace_across_a_sigkill_restart(
    connect: Connect, start_tickd: StartTickd, namespace: str
) -> None:
    server = start_tickd("--sync", "always")
    client = connect(server, namespace=namespace)
    client.register(tickd.TimerSpec(key="untraced", delay=1.0))  # no current span: nothing sent
    token = context.attach(baggage.set_baggage("order", "42"))
    try:
        with TRACER.start_as_current_span("register") as registering:
            client.register(tickd.TimerSpec(key="traced", delay=1.0))
    finally:
        context.detach(token)
    registered = registering.get_span_context()
    server.restart_after_sigkill()  # before either fires

    seen: list[Handled] = []
    acknowledged = threading.Event()

    def handle(expiration: tickd.pb.Expiration) -> None:
        seen.append(handled(expiration))
        if expiration.timer.key == "traced" and expiration.attempt == 1:
            raise RuntimeError("fail the first attempt: it comes again")

    def on_ack(expiration: tickd.pb.Expiration, was_acknowledged: bool) -> None:
        if expiration.timer.key == "traced" and was_acknowledged:
            acknowledged.set()

    subscriber = client.subscribe(handle, tickd.SubscriberOptions(ack_timeout=1.0), on_ack=on_ack)
    try:
        assert acknowledged.wait(PATIENCE), f"the traced timer's attempt 2 was not acknowledged: {seen}"
    finally:
        subscriber.stop()

    traced = [entry for entry in seen if entry.key == "traced"]
    assert [entry.attempt for entry in traced] == [1, 2], seen
    assert all(entry.carried and entry.order == "42" for entry in traced), traced
    assert [entry.carried for entry in seen if entry.key == "untraced"] == [False], seen

    spans = handler_spans(namespace, "traced")
    first, second = spans[1], spans[2]
    assert first.kind == trace.SpanKind.CONSUMER
    assert first.context is not None and first.parent is not None
    assert first.context.trace_id == registered.trace_id, "attempt 1 is not in the registering trace"
    assert first.parent.span_id == registered.span_id, "attempt 1 is not a child of the registering span"
    assert first.status.status_code == trace.StatusCode.ERROR
    assert traced[0].span.span_id == first.context.span_id, "the handler did not run inside its span"
    attributes = dict(first.attributes or {})
    assert attributes.pop("tickd.timer.id") and attributes.pop("tickd.delivery.id"), first.attributes
    assert attributes == {
        "messaging.system": "tickd", "tickd.namespace": namespace, "tickd.timer.key": "traced", "tickd.attempt": 1,
    }

    assert second.context is not None
    assert second.parent is None, "attempt 2 has a parent (it should only link to the registering span)"
    assert second.context.trace_id != registered.trace_id
    assert [(link.context.trace_id, link.context.span_id) for link in second.links] == [
        (registered.trace_id, registered.span_id)
    ]
    assert second.status.status_code != trace.StatusCode.ERROR
    untraced = handler_spans(namespace, "untraced")[1]
    assert untraced.parent is None and not untraced.links


@pytest.mark.asyncio
async def test_the_asyncio_subscriber_handles_in_a_child_of_the_registering_span(
    tickd_server: TickdServer, namespace: str
) -> None:
    client = AsyncClient(tickd_server.address, replace(TEST_CLIENT_OPTIONS, namespace=namespace))
    done = asyncio.Event()
    seen: list[Handled] = []

    async def handle(expiration: tickd.pb.Expiration) -> None:
        seen.append(handled(expiration))
        done.set()

    subscriber = client.subscribe(handle)
    try:
        with TRACER.start_as_current_span("register batch") as registering:
            await client.register_batch([tickd.TimerSpec(key="batched", delay=0.1)])
        await asyncio.wait_for(done.wait(), PATIENCE)
    finally:
        await subscriber.stop()
        await client.close()
    (span,) = handler_spans(namespace, "batched").values()
    assert span.parent is not None and span.parent.span_id == registering.get_span_context().span_id
    assert span.context is not None and span.context.trace_id == registering.get_span_context().trace_id
    assert seen[0].span.span_id == span.context.span_id


def test_a_reschedule_inside_a_span_makes_it_the_parent(client: tickd.Client, namespace: str) -> None:
    client.register(tickd.TimerSpec(key="moved", delay=3600))  # outside any span
    with TRACER.start_as_current_span("reschedule") as rescheduling:
        client.reschedule(key="moved", delay=0.1)
    handled_event = threading.Event()
    subscriber = client.subscribe(lambda expiration: handled_event.set())
    try:
        assert handled_event.wait(PATIENCE), "the rescheduled timer was not handled"
    finally:
        subscriber.stop()
    (span,) = handler_spans(namespace, "moved").values()
    assert span.parent is not None and span.parent.span_id == rescheduling.get_span_context().span_id
