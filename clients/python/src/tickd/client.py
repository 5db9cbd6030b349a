"""The blocking client: every call of tickd.v1.Timers and tickd.v1.Sinks, with deadlines,
metadata and retries."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from datetime import datetime
from types import TracebackType
from typing import TypeVar

import grpc

from . import retry, tracing
from ._convert import Seconds
from ._requests import BatchResult, Requests, batch_results
from .lease_keeper import LeaseKeeper
from .lease_table import LostLease
from .options import ClientOptions
from .spec import TimerSpec
from .subscriber import AckListener, Handler, Subscriber
from .subscription import SubscriberOptions
from .v1 import sinks_pb2 as sinks_pb
from .v1 import tickd_pb2 as pb
from .v1.sinks_pb2_grpc import SinksStub
from .v1.tickd_pb2_grpc import TimersStub

Request = TypeVar("Request")
Response = TypeVar("Response")


def open_channel(target: str, options: ClientOptions) -> grpc.Channel:
    """A channel to tickd: TLS when ``options.tls`` says so, plaintext otherwise."""
    channel_options = options.grpc_channel_options()
    if options.tls is not None:
        return grpc.secure_channel(target, options.tls.credentials(), options=channel_options)
    return grpc.insecure_channel(target, options=channel_options)


class Client:
    """A connection to tickd at ``target`` (``host:port``). Thread-safe; close it (or use
    ``with``) when done. Raises :class:`tickd.TickdError` for every refused call."""

    def __init__(self, target: str, options: ClientOptions | None = None) -> None:
        self.options = options or ClientOptions()
        self.channel = open_channel(target, self.options)
        self.stub = TimersStub(self.channel)
        self.sinks_stub = SinksStub(self.channel)
        self.requests = Requests(self.options.namespace)

    def close(self) -> None:
        self.channel.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, value: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.close()

    def call(
        self,
        method: grpc.UnaryUnaryMultiCallable[Request, Response],
        request: Request,
        *,
        idempotent: bool,
        timeout: float | None = None,
        traced: bool = False,
    ) -> Response:
        """One unary call with the client's metadata, retried if ``idempotent``; ``timeout``
        (default: the client's) bounds the whole call, each attempt getting the time left;
        with ``traced``, the current trace context goes along (see :mod:`tickd.tracing`)."""
        metadata = self.options.metadata() + (tracing.trace_metadata() if traced else ())
        return retry.call_blocking(
            self.options.retry, idempotent, self.options.timeout if timeout is None else timeout,
            lambda time_left: method(request, timeout=time_left, metadata=metadata),
        )

    def register(self, spec: TimerSpec, *, timeout: float | None = None) -> pb.NewTimeoutResponse:
        """Registers one timer: its id and deadline (no payload), ``created`` (False for a known
        key) and ``replaced``. Retried on UNAVAILABLE only when the spec has a key."""
        request, idempotent = self.requests.register(spec)
        return self.call(self.stub.NewTimeout, request, idempotent=idempotent, timeout=timeout, traced=True)

    def register_batch(self, specs: Sequence[TimerSpec], *, timeout: float | None = None) -> list[BatchResult]:
        """Registers many timers at once; each result is the registration or that item's
        :class:`TickdError`. Retried only when every spec has a key."""
        request, idempotent = self.requests.register_batch(specs)
        response = self.call(self.stub.NewTimeouts, request, idempotent=idempotent, timeout=timeout, traced=True)
        return batch_results(response)

    def cancel(
        self, timer_id: str | None = None, *, key: str | None = None, namespace: str | None = None,
        timeout: float | None = None,
    ) -> bool:
        """True if the timer was pending and is now cancelled (by key, a timer no longer
        pending is NOT_FOUND instead)."""
        request = self.requests.cancel(self.requests.timer_ref(timer_id, key, namespace))
        return self.call(self.stub.Cancel, request, idempotent=True, timeout=timeout).cancelled

    def get(
        self, timer_id: str | None = None, *, key: str | None = None, namespace: str | None = None,
        timeout: float | None = None,
    ) -> pb.Timer:
        """A pending timer with its payload and time remaining (NOT_FOUND when not pending)."""
        request = self.requests.get(self.requests.timer_ref(timer_id, key, namespace))
        return self.call(self.stub.Get, request, idempotent=True, timeout=timeout).timer

    def touch(
        self, timer_id: str | None = None, *, key: str | None = None, namespace: str | None = None,
        ttl: Seconds | None = None, timeout: float | None = None,
    ) -> pb.Timer:
        """One heartbeat of a lease: its deadline becomes now + ttl (``ttl`` also replaces it)."""
        request = self.requests.touch(self.requests.timer_ref(timer_id, key, namespace), ttl)
        return self.call(self.stub.Touch, request, idempotent=True, timeout=timeout).timer

    def reschedule(
        self, timer_id: str | None = None, *, key: str | None = None, namespace: str | None = None,
        delay: Seconds | None = None, deadline: datetime | None = None, payload: bytes | None = None,
        timeout: float | None = None,
    ) -> pb.Timer:
        """Moves a pending timer's next firing; ``payload`` (when not None) replaces its payload.
        Not retried: with ``delay``, a retry would count from a later now."""
        request = self.requests.reschedule(self.requests.timer_ref(timer_id, key, namespace), delay, deadline, payload)
        return self.call(self.stub.Reschedule, request, idempotent=False, timeout=timeout, traced=True).timer

    def pending_page(
        self, namespace: str | None = None, *, page_size: int = 0, page_token: str = "",
        include_dead: bool = False, timeout: float | None = None,
    ) -> pb.PendingResponse:
        """One Pending answer: ``count``, ``dead_count``, a page of timers and the next token.
        With ``page_size`` 0, only the counts (and, with ``include_dead``, dead expirations)."""
        request = self.requests.pending(namespace, page_size, page_token, include_dead)
        return self.call(self.stub.Pending, request, idempotent=True, timeout=timeout)

    def pending(
        self, namespace: str | None = None, *, page_size: int = 100, timeout: float | None = None
    ) -> Iterator[pb.Timer]:
        """Every pending timer of the namespace, fetched a page at a time as the iteration
        goes (a page may come back empty and still lead to more)."""
        page_token = ""
        while True:
            page = self.pending_page(namespace, page_size=page_size, page_token=page_token, timeout=timeout)
            yield from page.timers
            page_token = page.next_page_token
            if not page_token:
                return

    def dead_expirations(self, namespace: str | None = None, *, timeout: float | None = None) -> list[pb.Expiration]:
        """The namespace's expirations that ran out of delivery attempts, oldest first."""
        return list(self.pending_page(namespace, include_dead=True, timeout=timeout).dead_expirations)

    def redrive(
        self, delivery_ids: Iterable[str] | None = None, *, namespace: str | None = None,
        timeout: float | None = None,
    ) -> pb.RedriveResponse:
        """Sends dead expirations (these, or all of the namespace's) back to delivery."""
        request = self.requests.redrive(delivery_ids, namespace)
        return self.call(self.stub.Redrive, request, idempotent=False, timeout=timeout)

    def ack(
        self, delivery_ids: Iterable[str], *, namespace: str | None = None, timeout: float | None = None
    ) -> pb.AckResponse:
        """Acknowledges deliveries; ``unknown`` lists ids no longer awaiting an ack."""
        request = self.requests.ack(delivery_ids, namespace)
        return self.call(self.stub.Ack, request, idempotent=True, timeout=timeout)

    # Push sinks (tickd.v1.Sinks). Every call is retried on UNAVAILABLE: each one sets a state
    # rather than adding to it, so a repeat after a lost first attempt changes nothing more.

    def set_sink(
        self, url: str, *, namespace: str | None = None, rate: str = "", secrets: Iterable[str] | None = None,
        clear_secrets: bool = False, timeout: float | None = None,
    ) -> sinks_pb.SetSinkResponse:
        """Makes tickd push the namespace's expirations to ``url`` (``--sink``'s syntax), at most
        ``rate`` (``"50/s"``, ``"50/s,burst=10"``; "" for no limit). ``secrets`` (``whsec_...``)
        sign every push; None keeps the ones given before, unless ``clear_secrets``. The answer's
        ``changed`` is False when the sink already had this URL and rate, as after a retry."""
        request = self.requests.set_sink(url, namespace, rate, secrets, clear_secrets)
        return self.call(self.sinks_stub.SetSink, request, idempotent=True, timeout=timeout)

    def get_sink(self, namespace: str | None = None, *, timeout: float | None = None) -> sinks_pb.SinkView:
        """The namespace's sink, ``user:password@`` shown as ``***@`` (NOT_FOUND if none)."""
        request = sinks_pb.GetSinkRequest(namespace=self.requests.namespace(namespace))
        return self.call(self.sinks_stub.GetSink, request, idempotent=True, timeout=timeout).sink

    def list_sinks(self, *, timeout: float | None = None) -> list[sinks_pb.SinkView]:
        """Every sink the token may see, ``--sink``'s and the API's, by namespace."""
        request = sinks_pb.ListSinksRequest()
        return list(self.call(self.sinks_stub.ListSinks, request, idempotent=True, timeout=timeout).sinks)

    def pause_sink(self, namespace: str | None = None, *, timeout: float | None = None) -> sinks_pb.PauseSinkResponse:
        """Stops pushes until :meth:`resume_sink`, across restarts; what fires meanwhile waits in
        the namespace's buffer, spending no attempt. Answered once pushes under way ended."""
        request = sinks_pb.PauseSinkRequest(namespace=self.requests.namespace(namespace))
        return self.call(self.sinks_stub.PauseSink, request, idempotent=True, timeout=timeout)

    def resume_sink(self, namespace: str | None = None, *, timeout: float | None = None) -> sinks_pb.ResumeSinkResponse:
        """Lets a paused sink push again, what waited first."""
        request = sinks_pb.ResumeSinkRequest(namespace=self.requests.namespace(namespace))
        return self.call(self.sinks_stub.ResumeSink, request, idempotent=True, timeout=timeout)

    def remove_sink(self, namespace: str | None = None, *, timeout: float | None = None) -> None:
        """Removes a sink set through the API: the namespace's expirations wait for subscribers
        again. A retry whose lost first attempt removed it raises NOT_FOUND."""
        request = sinks_pb.RemoveSinkRequest(namespace=self.requests.namespace(namespace))
        self.call(self.sinks_stub.RemoveSink, request, idempotent=True, timeout=timeout)

    def sink_status(
        self, namespace: str | None = None, *, all_sinks: bool = False, timeout: float | None = None
    ) -> list[sinks_pb.SinkState]:
        """How the namespace's sink (or, with ``all_sinks``, every sink the token may see) is
        doing: its circuit and its pushes counted since this tickd process started it."""
        request = self.requests.sink_status(namespace, all_sinks)
        return list(self.call(self.sinks_stub.SinkStatus, request, idempotent=True, timeout=timeout).sinks)

    def lease_keeper(self, on_lost: Callable[[LostLease], None] | None = None) -> LeaseKeeper:
        """Starts a :class:`LeaseKeeper` (one KeepAlive stream, on its own threads)."""
        return LeaseKeeper(self, on_lost=on_lost)

    def subscribe(
        self, handler: Handler, options: SubscriberOptions | None = None, *, on_ack: AckListener | None = None
    ) -> Subscriber:
        """Starts a :class:`Subscriber` calling ``handler`` for each expiration (``on_ack`` is
        told whether each ack it sends was answered as acknowledged)."""
        return Subscriber(self, handler, options or SubscriberOptions(), on_ack=on_ack)
