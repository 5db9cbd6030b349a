"""Keeps leases alive over ONE KeepAlive stream, on threads (see :mod:`tickd.aio` for asyncio)."""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable, Iterator
from datetime import datetime
from typing import TYPE_CHECKING

import grpc

from ._convert import Seconds, to_seconds
from .backoff import Backoff, BackoffPolicy
from .errors import TickdError
from .lease_table import LeaseId, LeaseTable, LostLease, take_answer
from .v1 import tickd_pb2 as pb

if TYPE_CHECKING:
    from .client import Client

log = logging.getLogger("tickd.lease_keeper")

_END_OF_STREAM = None


class LeaseKeeper:
    """Heartbeats each added lease about every ttl/3 over one KeepAlive stream, re-opening the
    stream with back-off when it breaks. A lease tickd answers NOT_FOUND for (it expired, e.g.
    while tickd was down, or was cancelled) is dropped and reported to ``on_lost``, once; it is
    never re-created. Leases can be added and removed while it runs. ``stop()`` ends it.

    ``on_lost`` runs on the keeper's thread: keep it short (hand the news over, don't block).
    """

    def __init__(
        self,
        client: Client,
        on_lost: Callable[[LostLease], None] | None = None,
        reconnect: BackoffPolicy | None = None,
    ) -> None:
        self._client = client
        self._on_lost = on_lost
        self._backoff = Backoff(reconnect or BackoffPolicy(initial=0.2, maximum=5.0))
        self._table = LeaseTable()
        self._stopping = threading.Event()
        self._wake_sender = threading.Event()
        self._call_lock = threading.Lock()
        self._call: grpc.Call | None = None
        self._thread = threading.Thread(target=self._run, name="tickd-lease-keeper", daemon=True)
        self._thread.start()

    def add(self, timer_id: str, ttl: Seconds, *, namespace: str | None = None) -> LeaseId:
        """Keeps the lease ``timer_id`` (whose ttl is ``ttl``) alive from now on."""
        lease = LeaseId(self._client.requests.namespace(namespace), timer_id)
        self._table.add(lease, to_seconds(ttl))
        self._wake_sender.set()
        return lease

    def add_timer(self, timer: pb.Timer) -> LeaseId:
        """Keeps a registered lease alive: ``register(TimerSpec(ttl=...)).timer``."""
        if not timer.HasField("ttl"):
            raise ValueError(f"timer {timer.id} has no ttl: it is not a lease")
        return self.add(timer.id, timer.ttl.ToTimedelta(), namespace=timer.namespace)

    def remove(self, timer_id: str, *, namespace: str | None = None) -> bool:
        """Stops heartbeating a lease; tickd lets it expire once its ttl passes."""
        return self._table.remove(LeaseId(self._client.requests.namespace(namespace), timer_id))

    def deadline(self, timer_id: str, *, namespace: str | None = None) -> datetime | None:
        """The lease's deadline as of its last answered heartbeat (None before the first)."""
        return self._table.deadline(LeaseId(self._client.requests.namespace(namespace), timer_id))

    def leases(self) -> list[LeaseId]:
        return self._table.leases()

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
            for answer in call:
                self._backoff.reset()
                take_answer(self._table, answer, self._on_lost)
            log.info("KeepAlive stream ended by tickd; re-opening it")
        except grpc.RpcError as error:
            if not self._stopping.is_set():
                log.warning("KeepAlive stream broke (%s); re-opening it", TickdError.from_rpc_error(error))
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
