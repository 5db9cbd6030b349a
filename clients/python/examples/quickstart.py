"""The README's quick start, whole: register a timer, consume and acknowledge its
expiration, keep a lease alive. Type-checked by the check (mypy --strict against the
installed package) and run by tests/test_examples.py against a real tickd.

    python examples/quickstart.py 127.0.0.1:50051
"""

from __future__ import annotations

import sys
import threading

import tickd


def main(address: str) -> None:
    handled = threading.Event()

    def handle(expiration: tickd.pb.Expiration) -> None:  # acknowledged once it returns
        print(f"fired {expiration.timer.key} (attempt {expiration.attempt}): {expiration.timer.payload!r}")
        handled.set()

    with tickd.Client(address, tickd.ClientOptions(namespace="quickstart")) as client:
        subscriber = client.subscribe(handle, tickd.SubscriberOptions(max_in_flight=4))
        client.register(tickd.TimerSpec(key="order-42", delay=0.5, payload=b"close order 42"))

        keeper = client.lease_keeper(on_lost=lambda lost: print(f"lease lost: {lost.lease.timer_id}"))
        keeper.add_timer(client.register(tickd.TimerSpec(key="worker-7", ttl=30)).timer)

        if not handled.wait(60):
            sys.exit("no expiration within 60 s")
        keeper.stop()
        subscriber.stop()
        client.cancel(key="worker-7")
    print("quickstart ok")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "127.0.0.1:50051")
