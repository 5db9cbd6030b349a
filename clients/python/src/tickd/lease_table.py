"""The bookkeeping of a lease keeper, with no I/O: which leases are kept, when each is next
heartbeated, which heartbeat an answer belongs to, and which leases were lost. Shared by the
blocking and the asyncio keepers, which only move messages and wait."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime

import grpc

from ._convert import from_timestamp
from .errors import TickdError
from .v1 import tickd_pb2 as pb

log = logging.getLogger("tickd.lease_keeper")


@dataclass(frozen=True)
class LeaseId:
    """A lease (a timer with a ttl), by namespace and the id tickd gave it."""

    namespace: str
    timer_id: str


@dataclass(frozen=True)
class LostLease:
    """A lease that tickd no longer knows: it expired (its heartbeats came too late, e.g. while
    tickd or the connection was down) or was cancelled. The keeper stopped heartbeating it and
    does not re-create it."""

    lease: LeaseId
    error: TickdError
    #: The deadline the last successful heartbeat was answered with (None if there was none).
    last_deadline: datetime | None


@dataclass
class _LeaseState:
    interval: float
    next_heartbeat: float
    deadline: datetime | None = None


@dataclass
class LeaseTable:
    """Leases kept alive, each heartbeated every ttl/3 (``monotonic`` seconds)."""

    _leases: dict[LeaseId, _LeaseState] = field(default_factory=dict)
    _sent: dict[int, LeaseId] = field(default_factory=dict)
    _sequence: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, lease: LeaseId, ttl_seconds: float) -> None:
        """Keeps ``lease`` alive from now on; its first heartbeat is due at once."""
        if ttl_seconds <= 0:
            raise ValueError("a lease's ttl must be positive")
        with self._lock:
            previous = self._leases.get(lease)
            self._leases[lease] = _LeaseState(
                interval=ttl_seconds / 3,
                next_heartbeat=time.monotonic(),
                deadline=previous.deadline if previous else None,
            )

    def remove(self, lease: LeaseId) -> bool:
        """Stops heartbeating ``lease`` (tickd lets it expire after its ttl)."""
        with self._lock:
            return self._leases.pop(lease, None) is not None

    def leases(self) -> list[LeaseId]:
        with self._lock:
            return list(self._leases)

    def deadline(self, lease: LeaseId) -> datetime | None:
        """The deadline tickd gave at the last answered heartbeat; None if none yet (or not kept)."""
        with self._lock:
            state = self._leases.get(lease)
            return state.deadline if state else None

    def new_stream(self) -> None:
        """A new KeepAlive stream: answers of the old one will never come, and every lease is
        heartbeated at once (a lease that expired meanwhile is reported lost by its answer)."""
        now = time.monotonic()
        with self._lock:
            self._sent.clear()
            for state in self._leases.values():
                state.next_heartbeat = now

    def due_heartbeats(self) -> list[pb.KeepAliveRequest]:
        """The heartbeats due now, each numbered, and the next one of each lease scheduled."""
        now = time.monotonic()
        requests = []
        with self._lock:
            for lease, state in self._leases.items():
                if state.next_heartbeat <= now:
                    self._sequence += 1
                    self._sent[self._sequence] = lease
                    state.next_heartbeat = now + state.interval
                    requests.append(
                        pb.KeepAliveRequest(
                            timer=pb.TimerRef(namespace=lease.namespace, id=lease.timer_id),
                            sequence=self._sequence,
                        )
                    )
        return requests

    def seconds_until_next_heartbeat(self) -> float | None:
        """How long until a heartbeat is due (0 if one is); None with no lease to keep."""
        with self._lock:
            if not self._leases:
                return None
            soonest = min(state.next_heartbeat for state in self._leases.values())
        return max(0.0, soonest - time.monotonic())

    def answered(self, answer: pb.KeepAliveResponse) -> LostLease | TickdError | None:
        """Takes one answer: a new deadline (None returned), a lost lease (NOT_FOUND: it is
        dropped from the table), or another per-heartbeat error (the lease stays kept and is
        heartbeated again on schedule)."""
        with self._lock:
            lease = self._sent.pop(answer.sequence, None)
            state = self._leases.get(lease) if lease else None
            if lease is None or state is None:
                return None  # removed meanwhile, or an answer to an older stream
            if answer.HasField("error"):
                error = TickdError.from_status_number(answer.error.code, answer.error.message)
                if error.code != grpc.StatusCode.NOT_FOUND:
                    return error
                del self._leases[lease]
                return LostLease(lease=lease, error=error, last_deadline=state.deadline)
            state.deadline = from_timestamp(answer.deadline)
            return None


def take_answer(table: LeaseTable, answer: pb.KeepAliveResponse, on_lost: Callable[[LostLease], None] | None) -> None:
    """Records one KeepAlive answer, and tells ``on_lost`` about a lease tickd no longer knows."""
    outcome = table.answered(answer)
    if isinstance(outcome, LostLease):
        log.warning("lease %s lost: %s", outcome.lease, outcome.error)
        if on_lost is not None:
            on_lost(outcome)
    elif isinstance(outcome, TickdError):
        log.warning("heartbeat refused (the lease stays kept): %s", outcome)
