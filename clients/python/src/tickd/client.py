"""The blocking client: every call of tickd.v1.Timers, with deadlines, metadata and retries."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from datetime import datetime
from types import TracebackType
from typing import TypeVar

import grpc

from . import retry
from ._convert import Seconds
from ._requests import BatchResult, Requests, batch_results
from .lease_keeper import LeaseKeeper
from .lease_table import LostLease
from .options import ClientOptions
from .spec import TimerSpec
from .subscriber import AckListener, Handler, Subscriber
from .subscription import SubscriberOptions
from .v1 import tickd_pb2 as pb
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
    ) -> Response:
        """One unary call with the client's metadata, retried if ``idempotent``; ``timeout``
        (default: the client's) bounds the whole call, each attempt getting the time left."""
        metadata = self.options.metadata()
        return retry.call_blocking(
            self.options.retry, idempotent, self.options.timeout if timeout is None else timeout,
            lambda time_left: method(request, timeout=time_left, metadata=metadata),
        )

    def register(self, spec: TimerSpec, *, timeout: float | None = None) -> pb.NewTimeoutResponse:
        """Registers one timer: its id and deadline (no payload), ``created`` (False for a known
        key) and ``replaced``. Retried on UNAVAILABLE only when the spec has a key."""
        request, idempotent = self.requests.register(spec)
        return self.call(self.stub.NewTimeout, request, idempotent=idempotent, timeout=timeout)

    def register_batch(self, specs: Sequence[TimerSpec], *, timeout: float | None = None) -> list[BatchResult]:
        """Registers many timers at once; each result is the registration or that item's
        :class:`TickdError`. Retried only when every spec has a key."""
        request, idempotent = self.requests.register_batch(specs)
        return batch_results(self.call(self.stub.NewTimeouts, request, idempotent=idempotent, timeout=timeout))

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
        return self.call(self.stub.Reschedule, request, idempotent=False, timeout=timeout).timer

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

    def lease_keeper(self, on_lost: Callable[[LostLease], None] | None = None) -> LeaseKeeper:
        """Starts a :class:`LeaseKeeper` (one KeepAlive stream, on its own threads)."""
        return LeaseKeeper(self, on_lost=on_lost)

    def subscribe(
        self, handler: Handler, options: SubscriberOptions | None = None, *, on_ack: AckListener | None = None
    ) -> Subscriber:
        """Starts a :class:`Subscriber` calling ``handler`` for each expiration (``on_ack`` is
        told whether each ack it sends was answered as acknowledged)."""
        return Subscriber(self, handler, options or SubscriberOptions(), on_ack=on_ack)
