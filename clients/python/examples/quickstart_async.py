"""The quick start with asyncio (tickd.aio): the subscriber and the lease keeper are tasks.

    python examples/quickstart_async.py 127.0.0.1:50051
"""

from __future__ import annotations

import asyncio
import sys

import tickd
from tickd.aio import AsyncClient


async def main(address: str) -> None:
    handled = asyncio.Event()

    async def handle(expiration: tickd.pb.Expiration) -> None:  # acknowledged once it returns
        print(f"fired {expiration.timer.key} (attempt {expiration.attempt}): {expiration.timer.payload!r}")
        handled.set()

    async with AsyncClient(address, tickd.ClientOptions(namespace="quickstart-async")) as client:
        subscriber = client.subscribe(handle, tickd.SubscriberOptions(max_in_flight=4))
        await client.register(tickd.TimerSpec(key="order-42", delay=0.5, payload=b"close order 42"))

        keeper = client.lease_keeper(on_lost=lambda lost: print(f"lease lost: {lost.lease.timer_id}"))
        keeper.add_timer((await client.register(tickd.TimerSpec(key="worker-7", ttl=30))).timer)

        await asyncio.wait_for(handled.wait(), 60)
        await keeper.stop()
        await subscriber.stop()
        await client.cancel(key="worker-7")
    print("quickstart ok")


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1] if len(sys.argv) > 1 else "127.0.0.1:50051"))
