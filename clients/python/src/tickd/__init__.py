"""A client for tickd, the timer service.

    import tickd
    client = tickd.Client("127.0.0.1:50051", tickd.ClientOptions(namespace="orders"))
    client.register(tickd.TimerSpec(key="order-42", delay=1800, payload=b"close order 42"))

:class:`Client` is blocking (its lease keeper and subscriber run on threads);
:mod:`tickd.aio` has the same for asyncio. The generated stubs are in :mod:`tickd.v1`: the Timers service's
messages as ``tickd.pb``, the Sinks service's as ``tickd.sinks_pb``.
"""

from ._requests import BatchResult
from .backoff import BackoffPolicy
from .client import Client
from .errors import TickdError
from .lease_keeper import LeaseKeeper
from .lease_table import LeaseId, LostLease
from .options import ClientOptions, TlsOptions
from .retry import RetryPolicy
from .spec import TimerSpec
from .subscriber import AckListener, Handler, Subscriber
from .subscription import SubscriberOptions
from .v1 import sinks_pb2 as sinks_pb
from .v1 import tickd_pb2 as pb

__all__ = [
    "AckListener",
    "BackoffPolicy",
    "BatchResult",
    "Client",
    "ClientOptions",
    "Handler",
    "LeaseId",
    "LeaseKeeper",
    "LostLease",
    "RetryPolicy",
    "Subscriber",
    "SubscriberOptions",
    "TickdError",
    "TimerSpec",
    "TlsOptions",
    "pb",
    "sinks_pb",
]
