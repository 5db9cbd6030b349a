"""The OpenTelemetry side of :mod:`tickd.tracing`; importing it fails without
``opentelemetry-api``. The W3C propagators are used whatever the global propagator is:
tickd stores and returns W3C trace context and baggage."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.baggage.propagation import W3CBaggagePropagator
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from .v1 import tickd_pb2 as pb

TRACER_NAME = "tickd"
_TRACE_CONTEXT = TraceContextTextMapPropagator()
_BAGGAGE = W3CBaggagePropagator()
_KEYS = ("traceparent", "tracestate", "baggage")


def trace_metadata() -> tuple[tuple[str, str], ...]:
    if not trace.get_current_span().get_span_context().is_valid:
        return ()
    carrier: dict[str, str] = {}
    _TRACE_CONTEXT.inject(carrier)
    _BAGGAGE.inject(carrier)
    return tuple((key, carrier[key]) for key in _KEYS if carrier.get(key))


@contextlib.contextmanager
def handler_span(expiration: pb.Expiration, namespace: str) -> Iterator[None]:
    carried = expiration.trace_context
    parent = otel_context.get_current()
    links: list[trace.Link] = []
    if carried.traceparent:
        registering = _TRACE_CONTEXT.extract({"traceparent": carried.traceparent, "tracestate": carried.tracestate})
        registering_span = trace.get_current_span(registering).get_span_context()
        if expiration.attempt <= 1:
            parent = registering
        elif registering_span.is_valid:
            links.append(trace.Link(registering_span))
    if carried.baggage:  # the registering call's baggage, on every attempt
        parent = _BAGGAGE.extract({"baggage": carried.baggage}, context=parent)
    attributes: dict[str, str | int] = {
        "messaging.system": "tickd",
        "tickd.namespace": namespace,
        "tickd.timer.id": expiration.timer.id,
        "tickd.timer.key": expiration.timer.key,
        "tickd.attempt": expiration.attempt,
        "tickd.delivery.id": expiration.delivery_id,
    }
    tracer = trace.get_tracer(TRACER_NAME)
    token = otel_context.attach(parent)  # its baggage too is current in the handler
    try:
        with tracer.start_as_current_span(
            f"tickd.expiration {namespace}", kind=trace.SpanKind.CONSUMER, links=links, attributes=attributes
        ):
            yield
    finally:
        otel_context.detach(token)
