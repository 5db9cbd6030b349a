"""Waiting for what the tests expect, with a generous overall deadline instead of sleeps."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TypeVar

#: The overall deadline of any wait: long, since the machine is shared and slow at times;
#: a wait that passes returns as soon as its condition holds.
PATIENCE = 90.0

T = TypeVar("T")


def eventually(probe: Callable[[], T | None], what: str, timeout: float = PATIENCE, interval: float = 0.05) -> T:
    """Calls ``probe`` until it returns something true (for states only a query can see, such
    as tickd's counts); fails naming ``what`` at the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what} (last: {value!r})")
        time.sleep(interval)


class Recorder:
    """What handlers and ack listeners saw, shared between their threads and the test."""

    def __init__(self) -> None:
        self.condition = threading.Condition()
        self.handled: list[str] = []  # timer keys, once per delivery
        self.attempts: dict[str, list[int]] = {}
        self.acknowledged: set[str] = set()  # keys whose ack tickd answered as acknowledged
        self.not_acknowledged: list[str] = []

    def record_handled(self, key: str, attempt: int) -> None:
        with self.condition:
            self.handled.append(key)
            self.attempts.setdefault(key, []).append(attempt)
            self.condition.notify_all()

    def record_ack(self, key: str, acknowledged: bool) -> None:
        with self.condition:
            if acknowledged:
                self.acknowledged.add(key)
            else:
                self.not_acknowledged.append(key)
            self.condition.notify_all()

    def wait_for(self, condition: Callable[[Recorder], bool], what: str, timeout: float = PATIENCE) -> None:
        with self.condition:
            if not self.condition.wait_for(lambda: condition(self), timeout):
                raise AssertionError(f"timed out waiting for {what}: handled {self.handled}, "
                                     f"acknowledged {sorted(self.acknowledged)}")

    def wait_acknowledged(self, keys: set[str], timeout: float = PATIENCE) -> None:
        self.wait_for(lambda recorder: keys <= recorder.acknowledged, f"acks of {sorted(keys)}", timeout)
