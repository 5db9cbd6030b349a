"""Keeps leases alive over ONE KeepAlive stream, on threads (see :mod:`tickd.aio` for asyncio)."""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

import grpc

from .backoff import RECONNECT_BACKOFF, Backoff, BackoffPolicy
from .errors import TickdError
from .lease_set import LeaseSet
from .lease_table import LostLease, take_answer
from .v1 import tickd_pb2 as pb

if TYPE_CHECKING:
    from .client import Client

log = logging.getLogger("tickd.lease_keeper")

_END_OF_STREAM = None


class LeaseKeeper(LeaseSet):
    """Heartbeats each added lease about every ttl/3 over one KeepAlive stream, re-opening the
    stream with back-off when it breaks. A lease tickd answers NOT_FOUND for (it expired, e.g.
    while tickd was down, or was cancelled) is dropped and reported to ``on_lost``, once; it is
    never re-created. Leases can be added and removed while it runs. ``stop()`` ends it.

    ``on_lost`` runs on the keeper's thread: keep it short (hand the news over, don't block).

    A refusal of the stream that reconnecting cannot cure (UNAUTHENTICATED, PERMISSION_DENIED,
    INVALID_ARGUMENT, UNIMPLEMENTED) ends the keeper: ``error`` holds it, ``wait()`` raises it.
    """

    def __init__(
        self,
        client: Client,
        on_lost: Callable[[LostLease], None] | None = None,
        reconnect: BackoffPolicy | None = None,
    ) -> None:
        super().__init__(client.requests)
        self._client = client
        self._on_lost = on_lost
        self._backoff = Backoff(reconnect or RECONNECT_BACKOFF)
        self._stopping = threading.Event()
        self._wake_sender = threading.Event()
        self._call_lock = threading.Lock()
        self._call: grpc.Call | None = None
        self._error: TickdError | None = None
        self._thread = threading.Thread(target=self._run, name="tickd-lease-keeper", daemon=True)
        self._thread.start()

    def _heartbeats_changed(self) -> None:
        self._wake_sender.set()

    @property
    def error(self) -> TickdError | None:
        """The refusal the keeper ended on (None while it runs, or if it was stopped)."""
        return self._error

    @property
    def running(self) -> bool:
        """False once the keeper ended (stopped, or on a refusal): its threads are gone."""
        return self._thread.is_alive()

    def wait(self, timeout: float | None = None) -> None:
        """Blocks until the keeper ended (``stop()``, or a refusal reconnecting cannot cure),
        at most ``timeout`` seconds; raises that refusal as :class:`TickdError`."""
        self._thread.join(timeout)
        if self._error is not None:
            raise self._error

    def stop(self, timeout: float | None = None) -> None:
        """Stops heartbeating (the leases then expire after their ttl) and closes the stream."""
        self._stopping.set()
        self._wake_sender.set()
        with self._call_lock:
            if self._call is not None:
                self._call.cancel()
        self._thread.join(timeout)

    def __enter__(self) -> LeaseKeeper:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def _run(self) -> None:
        while not self._stopping.is_set():
            self._one_stream()
            if not self._stopping.is_set():
                self._stopping.wait(self._backoff.next_delay())

    def _one_stream(self) -> None:
        """Runs one KeepAlive stream until it breaks or the keeper stops."""
        outbox: queue.Queue[pb.KeepAliveRequest | None] = queue.Queue()
        stream_over = threading.Event()
        self._table.new_stream()
        requests: Iterator[pb.KeepAliveRequest] = iter(outbox.get, _END_OF_STREAM)
        call = self._client.stub.KeepAlive(requests, metadata=self._client.options.metadata())
        with self._call_lock:
            self._call = call
            if self._stopping.is_set():
                call.cancel()
        sender = threading.Thread(
            target=self._send_heartbeats, args=(outbox, stream_over), name="tickd-heartbeats", daemon=True
        )
        sender.start()
        try:
            # Headers come once tickd accepted the stream: the back-off starts over from here.
            call.initial_metadata()
            if call.is_active():
                self._backoff.reset()
            for answer in call:
                take_answer(self._table, answer, self._on_lost)
            log.info("KeepAlive stream ended by tickd; re-opening it")
        except grpc.RpcError as rpc_error:
            error = TickdError.from_rpc_error(rpc_error)
            if error.is_final_for_streams:
                log.error("KeepAlive stream refused (%s): the lease keeper ends", error)
                self._error = error
                self._stopping.set()
            elif not self._stopping.is_set():
                log.warning("KeepAlive stream broke (%s); re-opening it", error)
        finally:
            stream_over.set()
            self._wake_sender.set()
            outbox.put(_END_OF_STREAM)
            sender.join()
            with self._call_lock:
                self._call = None

    def _send_heartbeats(self, outbox: queue.Queue[pb.KeepAliveRequest | None], stream_over: threading.Event) -> None:
        """Queues each heartbeat when it is due, until the stream is over."""
        while not (stream_over.is_set() or self._stopping.is_set()):
            for request in self._table.due_heartbeats():
                outbox.put(request)
            self._wake_sender.wait(self._table.seconds_until_next_heartbeat())
            self._wake_sender.clear()
