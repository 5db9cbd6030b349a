"""What a subscriber asks tickd for, and how it treats deliveries (shared by both subscribers)."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from ._convert import Seconds, to_duration
from .backoff import RECONNECT_BACKOFF, BackoffPolicy
from .v1 import tickd_pb2 as pb


@dataclass(frozen=True)
class SubscriberOptions:
    """How a subscriber consumes a namespace's expirations.

    - ``namespace``: None means the client's default namespace.
    - ``max_in_flight``: handlers running at once; the stream is not read further while this
      many run (and tickd holds back deliveries beyond ``max_unacked``).
    - ``manual_ack``: the handler (or whoever it hands the expiration to) acknowledges with
      :meth:`Subscriber.ack`; otherwise the subscriber acknowledges once the handler returned
      without raising. A handler that raises leaves its expiration unacknowledged: tickd
      delivers it again after ``ack_timeout`` (attempt + 1), up to its attempt limit.
    - ``observer``: receive a copy of every expiration, outside sharing and acks.
    - ``server_auto_ack``: tickd counts each delivery acknowledged as soon as it is sent
      (at-most-once); the subscriber then sends no acks.
    - ``ack_timeout``, ``max_unacked``: asked of tickd (None: tickd's defaults).
    - ``reconnect``: the back-off between attempts to re-open a broken stream.
    """

    namespace: str | None = None
    max_in_flight: int = 8
    manual_ack: bool = False
    observer: bool = False
    server_auto_ack: bool = False
    ack_timeout: Seconds | None = None
    max_unacked: int | None = None
    reconnect: BackoffPolicy = RECONNECT_BACKOFF

    def __post_init__(self) -> None:
        if self.max_in_flight < 1:
            raise ValueError("SubscriberOptions.max_in_flight must be at least 1")

    @property
    def awaits_acks(self) -> bool:
        """Whether tickd awaits an ack for each delivery (and so takes back those of a stream
        that ended, to deliver them again); observers' copies and auto-acked deliveries are
        not redelivered."""
        return not (self.observer or self.server_auto_ack)

    @property
    def acks_after_handler(self) -> bool:
        """Whether the subscriber itself acknowledges each expiration its handler took."""
        return not (self.manual_ack or self.observer or self.server_auto_ack)

    def to_request(self, default_namespace: str) -> pb.SubscribeRequest:
        request = pb.SubscribeRequest(
            namespace=default_namespace if self.namespace is None else self.namespace,
            mode=pb.SubscribeRequest.MODE_OBSERVER if self.observer else pb.SubscribeRequest.MODE_SHARED,
            max_unacked=self.max_unacked or 0,
            auto_ack=self.server_auto_ack,
        )
        if self.ack_timeout is not None:
            request.ack_timeout.CopyFrom(to_duration(self.ack_timeout))
        return request


class StreamState:
    """One Subscribe stream, as the deliveries that came on it know it: ``ended`` turns True
    once the subscriber saw the stream end (broken, closed by tickd, or stopped).

    tickd takes back the unacknowledged deliveries of a stream that ended (and delivers them
    again, with a higher attempt), so the ack of a handler that returns after its stream ended
    would mean nothing: the subscriber does not send it (see :func:`report_unsent_ack`)."""

    __slots__ = ("ended",)

    def __init__(self) -> None:
        self.ended = False

    def end(self) -> None:
        """Marks the stream ended (from any thread; called again, it changes nothing)."""
        self.ended = True


def report_unsent_ack(log: logging.Logger, expiration: pb.Expiration) -> None:
    """Logs that a handler returned after its delivery's stream ended, so its ack was not sent."""
    log.warning(
        "timer %s (delivery %s, attempt %d): the handler returned after the Subscribe stream it came on "
        "had ended; its ack is not sent: tickd took the delivery back and delivers it again (attempt %d or "
        "later; dead once out of attempts)",
        expiration.timer.id, expiration.delivery_id, expiration.attempt, expiration.attempt + 1,
    )
