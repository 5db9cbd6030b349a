"""The asyncio client (grpc.aio): the blocking client's calls, awaited."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from datetime import datetime
from types import TracebackType
from typing import TYPE_CHECKING, TypeVar

import grpc
import grpc.aio

from .. import retry, tracing
from .._convert import Seconds
from .._requests import BatchResult, Requests, batch_results
from ..lease_table import LostLease
from ..options import ClientOptions
from ..spec import TimerSpec
from ..subscription import SubscriberOptions
from ..v1 import sinks_pb2 as sinks_pb
from ..v1 import tickd_pb2 as pb
from ..v1.sinks_pb2_grpc import SinksStub
from ..v1.tickd_pb2_grpc import TimersStub
from .lease_keeper import AsyncLeaseKeeper
from .subscriber import AckListener, AsyncHandler, AsyncSubscriber

if TYPE_CHECKING:
    # Only in the generated .pyi: at run time TimersStub over a grpc.aio channel is this.
    from ..v1.sinks_pb2_grpc import SinksAsyncStub
    from ..v1.tickd_pb2_grpc import TimersAsyncStub

Request = TypeVar("Request")
Response = TypeVar("Response")


def open_channel(target: str, options: ClientOptions) -> grpc.aio.Channel:
    """A grpc.aio channel to tickd: TLS when ``options.tls`` says so, plaintext otherwise."""
    channel_options = options.grpc_channel_options()
    if options.tls is not None:
        return grpc.aio.secure_channel(target, options.tls.credentials(), options=channel_options)
    return grpc.aio.insecure_channel(target, options=channel_options)


class AsyncClient:
    """A connection to tickd at ``target``, for asyncio code; create it inside the event loop
    that uses it, and ``await close()`` (or ``async with``) when done. Methods and their
    retries are those of :class:`tickd.Client`."""

    def __init__(self, target: str, options: ClientOptions | None = None) -> None:
        self.options = options or ClientOptions()
        self.channel = open_channel(target, self.options)
        self.stub: TimersAsyncStub = TimersStub(self.channel)
        self.sinks_stub: SinksAsyncStub = SinksStub(self.channel)
        self.requests = Requests(self.options.namespace)

    async def close(self) -> None:
        await self.channel.close()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, value: BaseException | None, traceback: TracebackType | None
    ) -> None:
        await self.close()

    async def call(
        self,
        method: grpc.aio.UnaryUnaryMultiCallable[Request, Response],
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

        async def attempt(time_left: float | None) -> Response:
            return await method(request, timeout=time_left, metadata=metadata)

        return await retry.call_async(
            self.options.retry, idempotent, self.options.timeout if timeout is None else timeout, attempt
        )

    async def register(self, spec: TimerSpec, *, timeout: float | None = None) -> pb.NewTimeoutResponse:
        """See :meth:`tickd.Client.register` (retried only with a key)."""
        request, idempotent = self.requests.register(spec)
        return await self.call(self.stub.NewTimeout, request, idempotent=idempotent, timeout=timeout, traced=True)

    async def register_batch(self, specs: Sequence[TimerSpec], *, timeout: float | None = None) -> list[BatchResult]:
        """See :meth:`tickd.Client.register_batch` (retried only when every spec has a key)."""
        request, idempotent = self.requests.register_batch(specs)
        response = await self.call(self.stub.NewTimeouts, request, idempotent=idempotent, timeout=timeout, traced=True)
        return batch_results(response)

    async def cancel(
        self, timer_id: str | None = None, *, key: str | None = None, namespace: str | None = None,
        timeout: float | None = None,
    ) -> bool:
        request = self.requests.cancel(self.requests.timer_ref(timer_id, key, namespace))
        return (await self.call(self.stub.Cancel, request, idempotent=True, timeout=timeout)).cancelled

    async def get(
        self, timer_id: str | None = None, *, key: str | None = None, namespace: str | None = None,
        timeout: float | None = None,
    ) -> pb.Timer:
        request = self.requests.get(self.requests.timer_ref(timer_id, key, namespace))
        return (await self.call(self.stub.Get, request, idempotent=True, timeout=timeout)).timer

    async def touch(
        self, timer_id: str | None = None, *, key: str | None = None, namespace: str | None = None,
        ttl: Seconds | None = None, timeout: float | None = None,
    ) -> pb.Timer:
        request = self.requests.touch(self.requests.timer_ref(timer_id, key, namespace), ttl)
        return (await self.call(self.stub.Touch, request, idempotent=True, timeout=timeout)).timer

    async def reschedule(
        self, timer_id: str | None = None, *, key: str | None = None, namespace: str | None = None,
        delay: Seconds | None = None, deadline: datetime | None = None, payload: bytes | None = None,
        timeout: float | None = None,
    ) -> pb.Timer:
        request = self.requests.reschedule(self.requests.timer_ref(timer_id, key, namespace), delay, deadline, payload)
        return (await self.call(self.stub.Reschedule, request, idempotent=False, timeout=timeout, traced=True)).timer

    async def pending_page(
        self, namespace: str | None = None, *, page_size: int = 0, page_token: str = "",
        include_dead: bool = False, timeout: float | None = None,
    ) -> pb.PendingResponse:
        request = self.requests.pending(namespace, page_size, page_token, include_dead)
        return await self.call(self.stub.Pending, request, idempotent=True, timeout=timeout)

    async def pending(
        self, namespace: str | None = None, *, page_size: int = 100, timeout: float | None = None
    ) -> AsyncIterator[pb.Timer]:
        """Every pending timer of the namespace, a page fetched at a time as iteration goes."""
        page_token = ""
        while True:
            page = await self.pending_page(namespace, page_size=page_size, page_token=page_token, timeout=timeout)
            for timer in page.timers:
                yield timer
            page_token = page.next_page_token
            if not page_token:
                return

    async def dead_expirations(
        self, namespace: str | None = None, *, timeout: float | None = None
    ) -> list[pb.Expiration]:
        return list((await self.pending_page(namespace, include_dead=True, timeout=timeout)).dead_expirations)

    async def redrive(
        self, delivery_ids: Iterable[str] | None = None, *, namespace: str | None = None,
        timeout: float | None = None,
    ) -> pb.RedriveResponse:
        request = self.requests.redrive(delivery_ids, namespace)
        return await self.call(self.stub.Redrive, request, idempotent=False, timeout=timeout)

    async def ack(
        self, delivery_ids: Iterable[str], *, namespace: str | None = None, timeout: float | None = None
    ) -> pb.AckResponse:
        request = self.requests.ack(delivery_ids, namespace)
        return await self.call(self.stub.Ack, request, idempotent=True, timeout=timeout)

    # Push sinks: see :meth:`tickd.Client.set_sink` and the others (all retried on UNAVAILABLE).

    async def set_sink(
        self, url: str, *, namespace: str | None = None, rate: str = "", secrets: Iterable[str] | None = None,
        clear_secrets: bool = False, timeout: float | None = None,
    ) -> sinks_pb.SetSinkResponse:
        request = self.requests.set_sink(url, namespace, rate, secrets, clear_secrets)
        return await self.call(self.sinks_stub.SetSink, request, idempotent=True, timeout=timeout)

    async def get_sink(self, namespace: str | None = None, *, timeout: float | None = None) -> sinks_pb.SinkView:
        request = sinks_pb.GetSinkRequest(namespace=self.requests.namespace(namespace))
        return (await self.call(self.sinks_stub.GetSink, request, idempotent=True, timeout=timeout)).sink

    async def list_sinks(self, *, timeout: float | None = None) -> list[sinks_pb.SinkView]:
        request = sinks_pb.ListSinksRequest()
        return list((await self.call(self.sinks_stub.ListSinks, request, idempotent=True, timeout=timeout)).sinks)

    async def pause_sink(
        self, namespace: str | None = None, *, timeout: float | None = None
    ) -> sinks_pb.PauseSinkResponse:
        request = sinks_pb.PauseSinkRequest(namespace=self.requests.namespace(namespace))
        return await self.call(self.sinks_stub.PauseSink, request, idempotent=True, timeout=timeout)

    async def resume_sink(
        self, namespace: str | None = None, *, timeout: float | None = None
    ) -> sinks_pb.ResumeSinkResponse:
        request = sinks_pb.ResumeSinkRequest(namespace=self.requests.namespace(namespace))
        return await self.call(self.sinks_stub.ResumeSink, request, idempotent=True, timeout=timeout)

    async def remove_sink(self, namespace: str | None = None, *, timeout: float | None = None) -> None:
        request = sinks_pb.RemoveSinkRequest(namespace=self.requests.namespace(namespace))
        await self.call(self.sinks_stub.RemoveSink, request, idempotent=True, timeout=timeout)

    async def sink_status(
        self, namespace: str | None = None, *, all_sinks: bool = False, timeout: float | None = None
    ) -> list[sinks_pb.SinkState]:
        request = self.requests.sink_status(namespace, all_sinks)
        return list((await self.call(self.sinks_stub.SinkStatus, request, idempotent=True, timeout=timeout)).sinks)

    def lease_keeper(self, on_lost: Callable[[LostLease], None] | None = None) -> AsyncLeaseKeeper:
        """Starts an :class:`AsyncLeaseKeeper` task (call from inside the event loop)."""
        return AsyncLeaseKeeper(self, on_lost=on_lost)

    def subscribe(
        self, handler: AsyncHandler, options: SubscriberOptions | None = None, *, on_ack: AckListener | None = None
    ) -> AsyncSubscriber:
        """Starts an :class:`AsyncSubscriber` task awaiting ``handler`` for each expiration."""
        return AsyncSubscriber(self, handler, options or SubscriberOptions(), on_ack=on_ack)
