"""What a subscriber asks tickd for, and how it treats deliveries (shared by both subscribers)."""

from __future__ import annotations

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
