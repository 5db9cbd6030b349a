"""Exponential back-off with full jitter, shared by retries, the subscriber and the lease keeper."""

from __future__ import annotations

import random
from dataclasses import dataclass, field


@dataclass(frozen=True)
class BackoffPolicy:
    """How long to wait between attempts: ``initial`` seconds, times ``multiplier`` after each
    failure, never above ``maximum``. Each wait is drawn uniformly between ``(1 - jitter)``
    and 1 times that value, so that clients cut off together do not come back together."""

    initial: float = 0.1
    maximum: float = 5.0
    multiplier: float = 2.0
    jitter: float = 0.5

    def __post_init__(self) -> None:
        if self.initial <= 0 or self.maximum < self.initial or self.multiplier < 1:
            raise ValueError("BackoffPolicy needs 0 < initial <= maximum and multiplier >= 1")
        if not 0 <= self.jitter <= 1:
            raise ValueError("BackoffPolicy.jitter is a fraction between 0 and 1")


@dataclass
class Backoff:
    """The running state of one :class:`BackoffPolicy`: the next wait, until :meth:`reset`."""

    policy: BackoffPolicy
    _ceiling: float = field(init=False)
    _random: random.Random = field(init=False, default_factory=random.Random)

    def __post_init__(self) -> None:
        self._ceiling = self.policy.initial

    def next_delay(self) -> float:
        """Seconds to wait before the next attempt; each call makes the following one longer."""
        ceiling = self._ceiling
        self._ceiling = min(self.policy.maximum, ceiling * self.policy.multiplier)
        return ceiling * (1 - self.policy.jitter * self._random.random())

    def reset(self) -> None:
        """Called once an attempt worked: the next failure starts from ``initial`` again."""
        self._ceiling = self.policy.initial


#: How the subscriber and the lease keeper wait between attempts to re-open a broken stream.
RECONNECT_BACKOFF = BackoffPolicy(initial=0.2, maximum=5.0)
