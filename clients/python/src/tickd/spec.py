"""What to register: a timer, a repeating timer, a cron schedule or a lease."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from ._convert import Seconds, to_duration, to_timestamp
from .v1 import tickd_pb2 as pb


@dataclass(frozen=True)
class TimerSpec:
    """One timer to register (``tickd.v1.TimerSpec`` with Python types).

    - ``delay`` (from now) or ``deadline`` (an aware datetime): when it fires; with neither, a
      lease (``ttl``) fires after its ttl.
    - ``key``: unique in the namespace; registering a known key returns the existing timer, which
      makes the registration safe to retry (the client retries only keyed registrations).
    - ``replace`` (with a key): a pending timer under the key is replaced whole.
    - ``repeat``: re-arm after each firing; ``cron`` + ``time_zone``: a calendar schedule.
    - ``ttl``: a lease, kept alive by :meth:`Client.touch` or a lease keeper.
    - ``namespace``: None means the client's default namespace.
    """

    delay: Seconds | None = None
    deadline: datetime | None = None
    key: str = ""
    payload: bytes = b""
    repeat: Seconds | None = None
    ttl: Seconds | None = None
    cron: str = ""
    time_zone: str = ""
    replace: bool = False
    namespace: str | None = None

    def to_proto(self, default_namespace: str) -> pb.TimerSpec:
        spec = pb.TimerSpec(
            namespace=default_namespace if self.namespace is None else self.namespace,
            key=self.key,
            payload=self.payload,
            cron=self.cron,
            time_zone=self.time_zone,
            replace=self.replace,
        )
        if self.delay is not None:
            spec.delay.CopyFrom(to_duration(self.delay))
        if self.deadline is not None:
            spec.deadline.CopyFrom(to_timestamp(self.deadline))
        if self.repeat is not None:
            spec.repeat.CopyFrom(to_duration(self.repeat))
        if self.ttl is not None:
            spec.ttl.CopyFrom(to_duration(self.ttl))
        return spec
