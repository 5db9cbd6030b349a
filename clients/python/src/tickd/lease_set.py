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

    def _kept(self, timer_id: str, namespace: str | None) -> LeaseId:
        """The lease ``timer_id`` names: in ``namespace`` when given, else the one kept under
        that id in whatever namespace it was added with (``add_timer`` takes the timer's), and
        the client's default namespace when none is kept."""
        if namespace is not None:
            return LeaseId(namespace, timer_id)
        kept = [lease for lease in self._table.leases() if lease.timer_id == timer_id]
        if len(kept) == 1:
            return kept[0]
        return LeaseId(self._requests.namespace(None), timer_id)

    def remove(self, timer_id: str, *, namespace: str | None = None) -> bool:
        """Stops heartbeating a lease; tickd lets it expire once its ttl passes. Without
        ``namespace``, the lease kept under ``timer_id`` in the namespace it was added with."""
        return self._table.remove(self._kept(timer_id, namespace))

    def deadline(self, timer_id: str, *, namespace: str | None = None) -> datetime | None:
        """The lease's deadline as of its last answered heartbeat (None before the first, or
        once it is no longer kept). Without ``namespace``, the lease kept under ``timer_id`` in
        the namespace it was added with."""
        return self._table.deadline(self._kept(timer_id, namespace))

    def leases(self) -> list[LeaseId]:
        """The leases being kept (a lost one is no longer among them)."""
        return self._table.leases()
