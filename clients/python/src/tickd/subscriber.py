"""Consumes a namespace's expirations on threads (see :mod:`tickd.aio` for asyncio)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

import grpc

from . import tracing
from .backoff import Backoff
from .errors import TickdError
from .subscription import StreamState, SubscriberOptions, report_unsent_ack
from .v1 import tickd_pb2 as pb

if TYPE_CHECKING:
    from .client import Client

log = logging.getLogger("tickd.subscriber")

#: Called once per delivery; ``expiration.attempt`` is 1, then 2, 3... on redeliveries.
Handler = Callable[[pb.Expiration], None]
#: Told, for each expiration the subscriber acknowledges for its handler (and each
#: ``Subscriber.ack``), whether it was acknowledged: False when tickd answered its delivery id
#: as unknown (no longer awaited), and False, with no ack sent, when the handler returned
#: after the stream the expiration came on had ended (it is delivered again).
AckListener = Callable[[pb.Expiration, bool], None]


class Subscriber:
    """Hands each expiration of a namespace to ``handler`` on a pool of ``max_in_flight``
    threads, and acknowledges it once the handler returned without raising (unless
    ``manual_ack``). Re-opens the stream with exponential back-off and jitter when it breaks.

    Delivery is at-least-once: an expiration whose ack did not reach tickd (a restart, a
    handler that raised, a stream that broke first) is delivered again, so handlers must be
    idempotent. A handler that returns after the stream its expiration came on has ended (the
    subscriber reconnected meanwhile) gets no ack: tickd took that delivery back when the
    stream ended, so the ack is not sent, ``on_ack`` is told False and a warning is logged;
    the expiration comes again with a higher attempt. ``stop()`` returns once in-flight
    handlers finished (and their acks were sent) and the stream is closed; call it from
    outside the handlers.

    A refusal that reconnecting cannot cure (UNAUTHENTICATED, PERMISSION_DENIED,
    INVALID_ARGUMENT, UNIMPLEMENTED) ends the subscriber: ``error`` holds it, ``wait()``
    raises it, and ``stop()`` still waits for the handlers running.
    """

    def __init__(
        self, client: Client, handler: Handler, options: SubscriberOptions, on_ack: AckListener | None = None
    ) -> None:
        self._client = client
        self._handler = handler
        self.options = options
        self._on_ack = on_ack
        self._request = options.to_request(client.options.namespace)
        self._backoff = Backoff(options.reconnect)
        self._handlers = ThreadPoolExecutor(max_workers=options.max_in_flight, thread_name_prefix="tickd-handler")
        # Guards _in_flight, _stopping and _call: the reader waits on it for a free handler.
        self._state = threading.Condition()
        self._in_flight = 0
        self._stopping = False
        self._stopped_event = threading.Event()
        self._call: grpc.Call | None = None
        self._error: TickdError | None = None
        self._accepted_streams = 0
        self._reader = threading.Thread(target=self._run, name="tickd-subscriber", daemon=True)
        self._reader.start()

    @property
    def namespace(self) -> str:
        return self._request.namespace

    @property
    def running(self) -> bool:
        """False once stopped: the stream closed and the reader thread gone."""
        return self._reader.is_alive()

    @property
    def stopping(self) -> bool:
        """True once ``stop()`` began (or the subscriber ended on an error): no more handlers start."""
        with self._state:
            return self._stopping

    @property
    def accepted_streams(self) -> int:
        """How many Subscribe streams tickd accepted so far (1 once subscribed; each reconnect
        adds one)."""
        with self._state:
            return self._accepted_streams

    @property
    def error(self) -> TickdError | None:
        """The refusal the subscriber ended on (None while it runs, or if it was stopped)."""
        return self._error

    def wait(self, timeout: float | None = None) -> None:
        """Blocks until the subscriber ended (``stop()``, or a refusal reconnecting cannot
        cure), at most ``timeout`` seconds; raises that refusal as :class:`TickdError`."""
        self._reader.join(timeout)
        if self._error is not None:
            raise self._error

    def ack(self, expiration: pb.Expiration) -> bool:
        """Acknowledges one delivery (for ``manual_ack``), whatever stream it came on: True if
        tickd acknowledged it, False if tickd answered its id as unknown, no longer awaiting an
        ack (acknowledged already, its ack timeout passed, or its stream ended, a tickd restart
        included: it is delivered again). :meth:`Client.ack` acks many ids and answers which
        were unknown."""
        answer = self._client.ack([expiration.delivery_id], namespace=self.namespace)
        acknowledged = answer.acknowledged == 1
        if self._on_ack is not None:
            self._on_ack(expiration, acknowledged)
        return acknowledged

    def stop(self, timeout: float | None = None) -> None:
        """Takes no more expirations, waits for the handlers running, then closes the stream.
        Expirations received but not handled go back to tickd (delivered again)."""
        with self._state:
            self._stopping = True
            self._state.notify_all()
        self._stopped_event.set()
        self._handlers.shutdown(wait=True)
        with self._state:
            if self._call is not None:
                self._call.cancel()
        self._reader.join(timeout)

    def __enter__(self) -> Subscriber:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def _run(self) -> None:
        while not self._stopped_event.is_set():
            self._one_stream()
            if not self._stopped_event.is_set():
                self._stopped_event.wait(self._backoff.next_delay())

    def _one_stream(self) -> None:
        stream = StreamState()
        call = self._client.stub.Subscribe(self._request, metadata=self._client.options.metadata())
        # Marked ended as soon as the call ends, even while this thread waits for a free
        # handler: a handler returning then must not ack.
        if not call.add_callback(stream.end):
            stream.end()
        with self._state:
            if self._stopping:
                call.cancel()
                return
            self._call = call
        try:
            # Headers come once tickd accepted the subscription (a refusal ends the call first):
            # from then on the next break starts the back-off from its beginning.
            call.initial_metadata()
            if call.is_active():
                self._backoff.reset()
                with self._state:
                    self._accepted_streams += 1
            for response in call:
                self._dispatch(response.expiration, stream)
            log.info("Subscribe stream of %r ended by tickd; re-opening it", self.namespace)
        except grpc.RpcError as rpc_error:
            error = TickdError.from_rpc_error(rpc_error)
            if error.is_final_for_streams:
                self._end_on(error)
            elif not self._stopped_event.is_set():
                log.warning("Subscribe stream of %r broke (%s); re-opening it", self.namespace, error)
        finally:
            stream.end()
            with self._state:
                self._call = None

    def _end_on(self, error: TickdError) -> None:
        """Ends the subscriber on a refusal that re-opening the stream would only repeat."""
        log.error("Subscribe stream of %r refused (%s): the subscriber ends", self.namespace, error)
        self._error = error
        with self._state:
            self._stopping = True
            self._state.notify_all()
        self._stopped_event.set()

    def _dispatch(self, expiration: pb.Expiration, stream: StreamState) -> None:
        """Waits for a free handler thread, then hands the expiration over (dropped if stopping,
        or if its stream ended meanwhile and tickd awaited its ack: tickd took it back and
        delivers it again)."""
        with self._state:
            self._state.wait_for(lambda: self._stopping or self._in_flight < self.options.max_in_flight)
            if self._stopping or (stream.ended and self.options.awaits_acks):
                return
            self._in_flight += 1
            self._handlers.submit(self._handle, expiration, stream)

    def _handle(self, expiration: pb.Expiration, stream: StreamState) -> None:
        try:
            if self._run_handler(expiration) and self.options.acks_after_handler:
                self._ack_after_handler(expiration, stream)
        except TickdError as error:
            log.warning("ack of delivery %s failed (it will be delivered again): %s", expiration.delivery_id, error)
        finally:
            with self._state:
                self._in_flight -= 1
                self._state.notify_all()

    def _ack_after_handler(self, expiration: pb.Expiration, stream: StreamState) -> None:
        """Acks for a handler that returned, unless the stream the expiration came on has ended:
        tickd took the delivery back then (after a restart its id names nothing; an older tickd,
        which numbered deliveries from 1 at each start, would take it for another), so the ack
        is not sent."""
        if not stream.ended:
            self.ack(expiration)
            return
        report_unsent_ack(log, expiration)
        if self._on_ack is not None:
            self._on_ack(expiration, False)

    def _run_handler(self, expiration: pb.Expiration) -> bool:
        """True if the handler returned; one that raised leaves the expiration unacknowledged."""
        try:
            with tracing.handler_span(expiration, self.namespace):
                self._handler(expiration)
            return True
        except Exception:
            log.exception("handler failed on timer %s (attempt %d): left unacknowledged",
                          expiration.timer.id, expiration.attempt)
            return False
