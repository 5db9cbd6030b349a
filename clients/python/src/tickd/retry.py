"""Retries of idempotent calls on UNAVAILABLE (tickd restarting, a connection cut).

Only calls that cannot do anything twice are retried: Get, Cancel, Ack, Touch, Pending, and
registrations whose timers ALL carry a key (tickd answers a known key with the existing timer),
and every call of the Sinks service (each sets a state: done twice, it is done once).
A registration without a key is never retried: the first attempt may have registered the
timer before the connection broke, and a retry would register a second one.

A call's timeout bounds the whole call, retries included: each attempt gets the time left.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TypeVar

import grpc

from .backoff import Backoff, BackoffPolicy
from .errors import TickdError

T = TypeVar("T")


@dataclass(frozen=True)
class RetryPolicy:
    """Up to ``max_attempts`` attempts in all (1 turns retries off), waiting as ``backoff``
    says between them. Retried only on ``retry_on`` codes (UNAVAILABLE: the call never reached
    a working server, or the connection broke)."""

    max_attempts: int = 5
    backoff: BackoffPolicy = field(default_factory=lambda: BackoffPolicy(initial=0.1, maximum=2.0))
    retry_on: frozenset[grpc.StatusCode] = frozenset({grpc.StatusCode.UNAVAILABLE})

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError("RetryPolicy.max_attempts counts the first attempt: at least 1")

    def should_retry(self, error: TickdError, attempt: int) -> bool:
        """Whether attempt number ``attempt`` (1 for the first), which failed with ``error``,
        is followed by another."""
        return error.code in self.retry_on and attempt < self.max_attempts


@dataclass(frozen=True)
class CallDeadline:
    """The deadline of a whole call, its retries included (``monotonic`` seconds; None: none).
    Each attempt gets the time left; no attempt starts once the back-off would pass it."""

    expires_at: float | None

    @classmethod
    def after(cls, timeout: float | None) -> CallDeadline:
        return cls(None if timeout is None else time.monotonic() + timeout)

    def remaining(self) -> float | None:
        """The timeout of the next attempt: the time left (None: no deadline)."""
        return None if self.expires_at is None else max(0.0, self.expires_at - time.monotonic())

    def leaves_room_after(self, wait: float) -> bool:
        """Whether an attempt started after waiting ``wait`` seconds would still have time."""
        return self.expires_at is None or time.monotonic() + wait < self.expires_at


def call_blocking(
    policy: RetryPolicy, idempotent: bool, timeout: float | None, attempt_call: Callable[[float | None], T]
) -> T:
    """Runs ``attempt_call(timeout_of_this_attempt)`` (one RPC), again after a back-off while it
    fails with a retryable code, ``idempotent`` allows it and ``timeout`` (seconds, for the whole
    call) leaves time; raises :class:`TickdError` otherwise (the last attempt's error)."""
    backoff = Backoff(policy.backoff)
    deadline = CallDeadline.after(timeout)
    attempt = 1
    while True:
        try:
            return attempt_call(deadline.remaining())
        except grpc.RpcError as rpc_error:
            error = TickdError.from_rpc_error(rpc_error)
        wait = backoff.next_delay()
        if not (idempotent and policy.should_retry(error, attempt) and deadline.leaves_room_after(wait)):
            raise error
        time.sleep(wait)
        attempt += 1


async def call_async(
    policy: RetryPolicy, idempotent: bool, timeout: float | None,
    attempt_call: Callable[[float | None], Awaitable[T]],
) -> T:
    """:func:`call_blocking` for grpc.aio: the same policy and deadline, awaiting instead of sleeping."""
    backoff = Backoff(policy.backoff)
    deadline = CallDeadline.after(timeout)
    attempt = 1
    while True:
        try:
            return await attempt_call(deadline.remaining())
        except grpc.RpcError as rpc_error:
            error = TickdError.from_rpc_error(rpc_error)
        wait = backoff.next_delay()
        if not (idempotent and policy.should_retry(error, attempt) and deadline.leaves_room_after(wait)):
            raise error
        await asyncio.sleep(wait)
        attempt += 1
