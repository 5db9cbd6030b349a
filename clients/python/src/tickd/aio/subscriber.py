"""Consumes a namespace's expirations as asyncio tasks."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

import grpc

from .. import tracing
from ..backoff import Backoff
from ..errors import TickdError
from ..subscriber import AckListener
from ..subscription import StreamState, SubscriberOptions, report_unsent_ack
from ..v1 import tickd_pb2 as pb

if TYPE_CHECKING:
    from .client import AsyncClient

log = logging.getLogger("tickd.aio.subscriber")

#: Awaited once per delivery; ``expiration.attempt`` is 1, then 2, 3... on redeliveries.
AsyncHandler = Callable[[pb.Expiration], Awaitable[None]]

__all__ = ["AckListener", "AsyncHandler", "AsyncSubscriber"]


class AsyncSubscriber:
    """:class:`tickd.Subscriber` for asyncio: a task reads the stream and runs each handler
    as its own task, at most ``max_in_flight`` at once; acknowledges once the handler returned
    without raising (unless ``manual_ack``); re-opens the stream with exponential back-off and
    jitter. At-least-once: handlers must be idempotent. A handler that returns after the stream
    its expiration came on has ended gets no ack (``on_ack`` is told False, a warning is
    logged): tickd took the delivery back and delivers it again. ``await stop()`` returns once
    in-flight handlers finished (their acks sent) and the stream is closed.

    A refusal that reconnecting cannot cure (UNAUTHENTICATED, PERMISSION_DENIED,
    INVALID_ARGUMENT, UNIMPLEMENTED) ends the subscriber: ``error`` holds it and
    ``await wait()`` raises it."""

    def __init__(
        self, client: AsyncClient, handler: AsyncHandler, options: SubscriberOptions,
        on_ack: AckListener | None = None,
    ) -> None:
        self._client = client
        self._handler = handler
        self.options = options
        self._on_ack = on_ack
        self._request = options.to_request(client.options.namespace)
        self._backoff = Backoff(options.reconnect)
        self._free_slots = asyncio.Semaphore(options.max_in_flight)
        self._handlers: set[asyncio.Task[None]] = set()
        self._stopping = False
        self._error: TickdError | None = None
        self._reader = asyncio.get_running_loop().create_task(self._run(), name="tickd-subscriber")

    @property
    def namespace(self) -> str:
        return self._request.namespace

    @property
    def running(self) -> bool:
        """False once stopped: the stream closed and the reader task done."""
        return not self._reader.done()

    @property
    def stopping(self) -> bool:
        """True once ``stop()`` began (or the subscriber ended on an error)."""
        return self._stopping

    @property
    def error(self) -> TickdError | None:
        """The refusal the subscriber ended on (None while it runs, or if it was stopped)."""
        return self._error

    async def wait(self) -> None:
        """Returns once the subscriber ended (``stop()``, or a refusal reconnecting cannot
        cure); raises that refusal as :class:`TickdError`."""
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.shield(self._reader)
        if self._error is not None:
            raise self._error

    async def ack(self, expiration: pb.Expiration) -> bool:
        """Acknowledges one delivery (for ``manual_ack``), whatever stream it came on: True if
        tickd acknowledged it, False if tickd answered its id as unknown (no longer awaited:
        it is delivered again, or was acknowledged already)."""
        answer = await self._client.ack([expiration.delivery_id], namespace=self.namespace)
        acknowledged = answer.acknowledged == 1
        if self._on_ack is not None:
            self._on_ack(expiration, acknowledged)
        return acknowledged

    async def stop(self) -> None:
        """Takes no more expirations, waits for running handlers, then closes the stream."""
        self._stopping = True
        while self._handlers:
            await asyncio.gather(*self._handlers, return_exceptions=True)
        self._reader.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._reader

    async def __aenter__(self) -> AsyncSubscriber:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()

    async def _run(self) -> None:
        while not self._stopping:
            await self._one_stream()
            if not self._stopping:
                await asyncio.sleep(self._backoff.next_delay())

    async def _one_stream(self) -> None:
        stream = StreamState()
        call = self._client.stub.Subscribe(self._request, metadata=self._client.options.metadata())
        # Marked ended as soon as the call ends, even while the reader waits for a free slot.
        call.add_done_callback(lambda _: stream.end())
        try:
            # Headers come once tickd accepted the subscription (a refusal ends the call first):
            # from then on the next break starts the back-off from its beginning.
            await call.initial_metadata()
            if not call.done():
                self._backoff.reset()
            async for response in call:
                await self._dispatch(response.expiration, stream)
            log.info("Subscribe stream of %r ended by tickd; re-opening it", self.namespace)
        except grpc.RpcError as rpc_error:
            error = TickdError.from_rpc_error(rpc_error)
            if error.is_final_for_streams:
                log.error("Subscribe stream of %r refused (%s): the subscriber ends", self.namespace, error)
                self._error = error
                self._stopping = True
            else:
                log.warning("Subscribe stream of %r broke (%s); re-opening it", self.namespace, error)
        finally:
            stream.end()
            call.cancel()

    async def _dispatch(self, expiration: pb.Expiration, stream: StreamState) -> None:
        """Waits for a free slot, then runs the handler as a task (dropped if stopping, or if its
        stream ended meanwhile and tickd awaited its ack: tickd took it back and delivers it
        again)."""
        await self._free_slots.acquire()
        if self._stopping or (stream.ended and self.options.awaits_acks):
            self._free_slots.release()
            return
        task = asyncio.get_running_loop().create_task(self._handle(expiration, stream))
        self._handlers.add(task)
        task.add_done_callback(self._handlers.discard)

    async def _handle(self, expiration: pb.Expiration, stream: StreamState) -> None:
        try:
            if await self._run_handler(expiration) and self.options.acks_after_handler:
                if stream.ended:
                    # tickd took the delivery back when its stream ended: an ack would mean nothing.
                    report_unsent_ack(log, expiration)
                    if self._on_ack is not None:
                        self._on_ack(expiration, False)
                else:
                    await self.ack(expiration)
        except TickdError as error:
            log.warning("ack of delivery %s failed (it will be delivered again): %s", expiration.delivery_id, error)
        finally:
            self._free_slots.release()

    async def _run_handler(self, expiration: pb.Expiration) -> bool:
        """True if the handler returned; one that raised leaves the expiration unacknowledged."""
        try:
            with tracing.handler_span(expiration, self.namespace):
                await self._handler(expiration)
            return True
        except Exception:
            log.exception("handler failed on timer %s (attempt %d): left unacknowledged",
                          expiration.timer.id, expiration.attempt)
            return False
