"""A handler whose first delivery of one timer is held until the test lets it go, to make a
handler finish after the stream its expiration came on has ended; every other delivery is
held at a second gate, so that all of them await their acks at once."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

import pytest

import tickd
from waiting import PATIENCE


@dataclass(frozen=True)
class Delivered:
    key: str
    delivery_id: str
    attempt: int
    # The message itself: the subscriber hands the same object to the handler and to on_ack,
    # which tells deliveries apart even if a tickd repeated an id.
    expiration: tickd.pb.Expiration = field(compare=False, repr=False)


class HeldHandler:
    def __init__(self, held_key: str) -> None:
        self.held_key = held_key
        self.condition = threading.Condition()
        self.delivered: list[Delivered] = []
        self.acks: list[tuple[tickd.pb.Expiration, bool]] = []  # as on_ack was told
        self.release_held = threading.Event()
        self.release_others = threading.Event()

    def handle(self, expiration: tickd.pb.Expiration) -> None:
        delivered = Delivered(expiration.timer.key, expiration.delivery_id, expiration.attempt, expiration)
        with self.condition:
            first_of_held = delivered.key == self.held_key and not self.deliveries_of(self.held_key)
            self.delivered.append(delivered)
            self.condition.notify_all()
        gate = self.release_held if first_of_held else self.release_others
        assert gate.wait(PATIENCE), f"{delivered} was never released"

    def on_ack(self, expiration: tickd.pb.Expiration, acknowledged: bool) -> None:
        with self.condition:
            self.acks.append((expiration, acknowledged))
            self.condition.notify_all()

    def deliveries_of(self, key: str) -> list[Delivered]:
        with self.condition:
            return [delivered for delivered in self.delivered if delivered.key == key]

    def wait_for(self, what: str, condition: Callable[[HeldHandler], bool]) -> None:
        with self.condition:
            if not self.condition.wait_for(lambda: condition(self), PATIENCE):
                raise AssertionError(f"timed out waiting for {what}: delivered {self.delivered}, acks {self.acks}")

    def ack_of(self, delivered: Delivered) -> bool:
        """What on_ack was told about this delivery (waiting until it was told, once)."""
        def told() -> list[bool]:
            return [acknowledged for expiration, acknowledged in self.acks if expiration is delivered.expiration]

        self.wait_for(f"the ack of {delivered}", lambda _: bool(told()))
        with self.condition:
            answers = told()
        assert len(answers) == 1, f"on_ack told {answers} for {delivered}"
        return answers[0]


def unsent_ack_logged(caplog: pytest.LogCaptureFixture, delivery_id: str, logger: str = "tickd.subscriber") -> bool:
    """Whether the subscriber logged that it did not send this delivery's ack."""
    return any(
        record.name == logger and record.levelno == logging.WARNING
        and "its ack is not sent" in record.getMessage() and f"delivery {delivery_id}," in record.getMessage()
        for record in caplog.records
    )

