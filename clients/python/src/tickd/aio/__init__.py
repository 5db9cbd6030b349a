"""tickd for asyncio (grpc.aio): :class:`AsyncClient`, with its lease keeper and subscriber as tasks."""

from .client import AsyncClient
from .lease_keeper import AsyncLeaseKeeper
from .subscriber import AsyncHandler, AsyncSubscriber

__all__ = ["AsyncClient", "AsyncHandler", "AsyncLeaseKeeper", "AsyncSubscriber"]
