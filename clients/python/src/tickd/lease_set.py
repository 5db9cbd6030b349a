"""The part of a lease keeper its caller sees: which leases to keep, and their deadlines.
Shared by the blocking and the asyncio keepers, which differ only in how they wait."""

from __future__ import annotations

from datetime import datetime

from ._convert import Seconds, to_seconds
from ._requests import Requests
from .lease_table import LeaseId, LeaseTable
from .v1 import tickd_pb2 as pb


class LeaseSet:
    """Leases to keep alive, by id in a namespace (None: the client's default namespace).
    A subclass heartbeats them and is woken by :meth:`_heartbeats_changed` when one is added."""

    def __init__(self, requests: Requests) -> None:
        self._requests = requests
        self._table = LeaseTable()

    def _heartbeats_changed(self) -> None:
        """Wakes whatever sends heartbeats: a lease was added and is due at once."""
        raise NotImplementedError

    def add(self, timer_id: str, ttl: Seconds, *, namespace: str | None = None) -> LeaseId:
        """Keeps the lease ``timer_id`` (whose ttl is ``ttl``) alive from now on."""
        lease = LeaseId(self._requests.namespace(namespace), timer_id)
        self._table.add(lease, to_seconds(ttl))
        self._heartbeats_changed()
        return lease

    def add_timer(self, timer: pb.Timer) -> LeaseId:
        """Keeps a registered lease alive, e.g. ``register(TimerSpec(ttl=...)).timer``."""
        if not timer.HasField("ttl"):
            raise ValueError(f"timer {timer.id} has no ttl: it is not a lease")
        return self.add(timer.id, timer.ttl.ToTimedelta(), namespace=timer.namespace)

    def remove(self, timer_id: str, *, namespace: str | None = None) -> bool:
        """Stops heartbeating a lease; tickd lets it expire once its ttl passes."""
        return self._table.remove(LeaseId(self._requests.namespace(namespace), timer_id))

    def deadline(self, timer_id: str, *, namespace: str | None = None) -> datetime | None:
        """The lease's deadline as of its last answered heartbeat (None before the first, or
        once it is no longer kept)."""
        return self._table.deadline(LeaseId(self._requests.namespace(namespace), timer_id))

    def leases(self) -> list[LeaseId]:
        """The leases being kept (a lost one is no longer among them)."""
        return self._table.leases()
