"""Retries of idempotent calls on UNAVAILABLE (tickd restarting, a connection cut).

Only calls that cannot do anything twice are retried: Get, Cancel, Ack, Touch, Pending, and
registrations whose timers ALL carry a key (tickd answers a known key with the existing timer).
A registration without a key is never retried: the first attempt may have registered the
timer before the connection broke, and a retry would register a second one.
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


def call_blocking(policy: RetryPolicy, idempotent: bool, attempt_call: Callable[[], T]) -> T:
    """Runs ``attempt_call`` (one RPC), again after a back-off while it fails with a
    retryable code and ``idempotent`` allows it; raises :class:`TickdError` otherwise."""
    backoff = Backoff(policy.backoff)
    attempt = 1
    while True:
        try:
            return attempt_call()
        except grpc.RpcError as rpc_error:
            error = TickdError.from_rpc_error(rpc_error)
        if not (idempotent and policy.should_retry(error, attempt)):
            raise error
        time.sleep(backoff.next_delay())
        attempt += 1


async def call_async(policy: RetryPolicy, idempotent: bool, attempt_call: Callable[[], Awaitable[T]]) -> T:
    """:func:`call_blocking` for grpc.aio: the same policy, awaiting instead of sleeping."""
    backoff = Backoff(policy.backoff)
    attempt = 1
    while True:
        try:
            return await attempt_call()
        except grpc.RpcError as rpc_error:
            error = TickdError.from_rpc_error(rpc_error)
        if not (idempotent and policy.should_retry(error, attempt)):
            raise error
        await asyncio.sleep(backoff.next_delay())
        attempt += 1
