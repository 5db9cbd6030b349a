"""The request messages of every call and the unpacking of answers, shared by the blocking
and the asyncio clients so that both say exactly the same thing to tickd."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime

from ._convert import Seconds, to_duration, to_timestamp
from .errors import TickdError
from .spec import TimerSpec
from .v1 import sinks_pb2 as sinks_pb
from .v1 import tickd_pb2 as pb

#: One item of a batch's answer: the registration, or why that item alone failed.
BatchResult = pb.NewTimeoutResponse | TickdError


@dataclass(frozen=True)
class Requests:
    """Builds requests with the client's default namespace filled in where none is given."""

    default_namespace: str

    def namespace(self, namespace: str | None) -> str:
        return self.default_namespace if namespace is None else namespace

    def timer_ref(self, timer_id: str | None, key: str | None, namespace: str | None) -> pb.TimerRef:
        """A timer named by exactly one of its id and its key."""
        if timer_id is not None and key is None:
            return pb.TimerRef(namespace=self.namespace(namespace), id=timer_id)
        if key is not None and timer_id is None:
            return pb.TimerRef(namespace=self.namespace(namespace), key=key)
        raise ValueError("name the timer by exactly one of id and key")

    def register(self, spec: TimerSpec) -> tuple[pb.NewTimeoutRequest, bool]:
        """The request, and whether it may be retried: only with a key (see :mod:`tickd.retry`)."""
        return pb.NewTimeoutRequest(timer=spec.to_proto(self.default_namespace)), bool(spec.key)

    def register_batch(self, specs: Sequence[TimerSpec]) -> tuple[pb.NewTimeoutsRequest, bool]:
        """The request, and whether it may be retried: only when every timer has a key."""
        request = pb.NewTimeoutsRequest(timers=[spec.to_proto(self.default_namespace) for spec in specs])
        return request, all(spec.key for spec in specs)

    def cancel(self, ref: pb.TimerRef) -> pb.CancelRequest:
        return pb.CancelRequest(timer=ref)

    def get(self, ref: pb.TimerRef) -> pb.GetRequest:
        return pb.GetRequest(timer=ref)

    def touch(self, ref: pb.TimerRef, ttl: Seconds | None) -> pb.TouchRequest:
        request = pb.TouchRequest(timer=ref)
        if ttl is not None:
            request.ttl.CopyFrom(to_duration(ttl))
        return request

    def reschedule(
        self, ref: pb.TimerRef, delay: Seconds | None, deadline: datetime | None, payload: bytes | None
    ) -> pb.RescheduleRequest:
        """Exactly one of ``delay`` and ``deadline``; ``payload`` None keeps the timer's payload
        (b"" empties it: the field is ``optional bytes``)."""
        if (delay is None) == (deadline is None):
            raise ValueError("reschedule takes exactly one of delay and deadline")
        request = pb.RescheduleRequest(timer=ref)
        if delay is not None:
            request.delay.CopyFrom(to_duration(delay))
        if deadline is not None:
            request.deadline.CopyFrom(to_timestamp(deadline))
        if payload is not None:
            request.payload = payload
        return request

    def pending(
        self, namespace: str | None, page_size: int, page_token: str = "", include_dead: bool = False
    ) -> pb.PendingRequest:
        return pb.PendingRequest(
            namespace=self.namespace(namespace),
            page_size=page_size,
            page_token=page_token,
            include_dead=include_dead,
        )

    def ack(self, delivery_ids: Iterable[str], namespace: str | None) -> pb.AckRequest:
        return pb.AckRequest(namespace=self.namespace(namespace), delivery_ids=list(delivery_ids))

    def redrive(self, delivery_ids: Iterable[str] | None, namespace: str | None) -> pb.RedriveRequest:
        return pb.RedriveRequest(namespace=self.namespace(namespace), delivery_ids=list(delivery_ids or ()))

    def set_sink(
        self, url: str, namespace: str | None, rate: str, secrets: Iterable[str] | None, clear_secrets: bool
    ) -> sinks_pb.SetSinkRequest:
        """Secrets None (or none) keep those given before: tickd treats an empty list so, and
        refuses secrets with ``clear_secrets`` itself, naming both."""
        return sinks_pb.SetSinkRequest(
            namespace=self.namespace(namespace), url=url, rate=rate,
            secrets=list(secrets or ()), clear_secrets=clear_secrets,
        )

    def sink_status(self, namespace: str | None, all_sinks: bool) -> sinks_pb.SinkStatusRequest:
        """With ``all_sinks`` the namespace stays empty: tickd refuses the two together."""
        if all_sinks:
            if namespace is not None:
                raise ValueError("sink_status takes a namespace or all_sinks, not both")
            return sinks_pb.SinkStatusRequest(all=True)
        return sinks_pb.SinkStatusRequest(namespace=self.namespace(namespace))


def batch_results(response: pb.NewTimeoutsResponse) -> list[BatchResult]:
    """A batch's answer, in request order: each item registered, or its own error."""
    results: list[BatchResult] = []
    for result in response.results:
        if result.WhichOneof("result") == "error":
            results.append(TickdError.from_status_number(result.error.code, result.error.message))
        else:
            results.append(result.registered)
    return results
