"""Tracing with OpenTelemetry, when ``opentelemetry-api`` is installed (``pip install
'tickd[otel]'``); without it, these functions do nothing.

- :func:`trace_metadata`: the W3C ``traceparent``, ``tracestate`` and ``baggage`` of the
  current span, sent with the calls that register or reschedule a timer (tickd stores them
  with the timer and returns them on each of its expirations as ``Expiration.trace_context``).
- :func:`handler_span`: the CONSUMER span each subscriber runs its handler in.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from .v1 import tickd_pb2 as pb

try:
    from ._otel import handler_span as _otel_handler_span
    from ._otel import trace_metadata as _otel_trace_metadata

    OTEL_AVAILABLE = True
except ImportError:  # the otel extra is not installed
    OTEL_AVAILABLE = False

__all__ = ["OTEL_AVAILABLE", "handler_span", "trace_metadata"]


def trace_metadata() -> tuple[tuple[str, str], ...]:
    """The current trace context as gRPC metadata; empty without OpenTelemetry or a valid
    current span."""
    return _otel_trace_metadata() if OTEL_AVAILABLE else ()


@contextlib.contextmanager
def handler_span(expiration: pb.Expiration, namespace: str) -> Iterator[None]:
    """Runs the block (a handler) inside the span ``tickd.expiration <namespace>``: a child of
    the registering call's span on attempt 1, linked to it (its parent being whatever context
    is current, usually none) on later attempts. An exception leaving the block marks the
    span failed."""
    if not OTEL_AVAILABLE:
        yield
        return
    with _otel_handler_span(expiration, namespace):
        yield
