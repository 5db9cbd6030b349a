"""Keeps leases alive over ONE KeepAlive stream, as asyncio tasks."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

import grpc
import grpc.aio

from ..backoff import RECONNECT_BACKOFF, Backoff, BackoffPolicy
from ..errors import TickdError
from ..lease_set import LeaseSet
from ..lease_table import LostLease, take_answer
from ..v1 import tickd_pb2 as pb

if TYPE_CHECKING:
    from .client import AsyncClient

log = logging.getLogger("tickd.aio.lease_keeper")


class AsyncLeaseKeeper(LeaseSet):
    """:class:`tickd.LeaseKeeper` for asyncio: one task reads the KeepAlive stream, another
    writes each heartbeat when due (about every ttl/3). A lease answered NOT_FOUND is dropped
    and reported to ``on_lost`` (a plain function, called on the event loop); the stream is
    re-opened with back-off when it breaks. Create it inside the running loop; ``await stop()``.

    A refusal of the stream that reconnecting cannot cure (UNAUTHENTICATED, PERMISSION_DENIED,
    INVALID_ARGUMENT, UNIMPLEMENTED) ends the keeper: ``error`` holds it, ``await wait()``
    raises it."""

    def __init__(
        self,
        client: AsyncClient,
        on_lost: Callable[[LostLease], None] | None = None,
        reconnect: BackoffPolicy | None = None,
    ) -> None:
        super().__init__(client.requests)
        self._client = client
        self._on_lost = on_lost
        self._backoff = Backoff(reconnect or RECONNECT_BACKOFF)
        self._wake_writer = asyncio.Event()
        self._error: TickdError | None = None
        self._task = asyncio.get_running_loop().create_task(self._run(), name="tickd-lease-keeper")

    def _heartbeats_changed(self) -> None:
        self._wake_writer.set()

    @property
    def error(self) -> TickdError | None:
        """The refusal the keeper ended on (None while it runs, or if it was stopped)."""
        return self._error

    @property
    def running(self) -> bool:
        """False once the keeper ended (stopped, or on a refusal)."""
        return not self._task.done()

    async def wait(self) -> None:
        """Returns once the keeper ended (``stop()``, or a refusal reconnecting cannot cure);
        raises that refusal as :class:`TickdError`."""
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.shield(self._task)
        if self._error is not None:
            raise self._error

    async def stop(self) -> None:
        """Stops heartbeating (leases then expire after their ttl) and closes the stream."""
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task

    async def __aenter__(self) -> AsyncLeaseKeeper:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()

    async def _run(self) -> None:
        while self._error is None:
            await self._one_stream()
            if self._error is None:
                await asyncio.sleep(self._backoff.next_delay())

    async def _one_stream(self) -> None:
        self._table.new_stream()
        call = self._client.stub.KeepAlive(metadata=self._client.options.metadata())
        writer = asyncio.get_running_loop().create_task(self._write_heartbeats(call))
        try:
            # Headers come once tickd accepted the stream: the back-off starts over from here.
            await call.initial_metadata()
            if not call.done():
                self._backoff.reset()
            while (answer := await call.read()) is not grpc.aio.EOF:
                assert isinstance(answer, pb.KeepAliveResponse)
                take_answer(self._table, answer, self._on_lost)
            log.info("KeepAlive stream ended by tickd; re-opening it")
        except grpc.RpcError as rpc_error:
            error = TickdError.from_rpc_error(rpc_error)
            if error.is_final_for_streams:
                log.error("KeepAlive stream refused (%s): the lease keeper ends", error)
                self._error = error
            else:
                log.warning("KeepAlive stream broke (%s); re-opening it", error)
        finally:
            writer.cancel()
            call.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await writer

    async def _write_heartbeats(self, call: grpc.aio.StreamStreamCall[pb.KeepAliveRequest, pb.KeepAliveResponse]) -> None:
        """Writes each heartbeat when due, until cancelled with its stream."""
        while True:
            for request in self._table.due_heartbeats():
                await call.write(request)
            self._wake_writer.clear()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._wake_writer.wait(), self._table.seconds_until_next_heartbeat())
