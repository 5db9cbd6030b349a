#!/usr/bin/env python3
"""Delivery lateness of the usual Redis timer: a sorted set scored by deadline plus a poller.

A producer ZADDs timers at a steady --rate for --secs seconds (one ZADD of the members due
so far about every millisecond, paced against the start instant), each due --delay-ms after
it is added; its score is its deadline (ms since the epoch) and its member a sequence number.
A poller on its own connection does what such pollers do every --interval-ms:

    MULTI; ZRANGEBYSCORE key -inf <now>; ZREMRANGEBYSCORE key -inf <now>; EXEC

(atomic take of everything due), stamps the wall clock on receipt, then sleeps the interval.
Lateness = receipt - deadline. After the last deadline plus --grace-ms (or once everything
arrived) it prints one line, comparable with `tickd-bench e2e`:

    redis_poller interval_ms=.. rate=.. registered=.. fired_per_s=.. p50_late_ms=..
    p99_late_ms=.. max_late_ms=.. lost=.. duplicated=.. early=..
"""

import argparse
import math
import threading
import time

import redis


def quantile(sorted_values, q):
    """Nearest rank, as tickd-bench computes it."""
    if not sorted_values:
        return 0.0
    rank = math.ceil(q * len(sorted_values))
    return sorted_values[min(max(rank, 1), len(sorted_values)) - 1]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--key", default="tickd-bench:timers")
    parser.add_argument("--rate", type=int, default=5_000, help="timers added per second")
    parser.add_argument("--secs", type=int, default=10, help="seconds of adding")
    parser.add_argument("--delay-ms", type=int, default=1_000)
    parser.add_argument("--interval-ms", type=int, default=100, help="poll interval")
    parser.add_argument("--grace-ms", type=int, default=2_000)
    args = parser.parse_args()

    producer = redis.Redis(host=args.host, port=args.port)
    poller = redis.Redis(host=args.host, port=args.port)
    producer.delete(args.key)

    total = args.rate * args.secs
    received = {}  # member -> receipt count
    lateness = []  # ms, one per first receipt
    early = 0
    receipts = []  # (first, last) receipt wall time, ms
    stop = threading.Event()

    def poll():
        nonlocal early
        interval = args.interval_ms / 1000
        while not stop.is_set():
            now_ms = time.time() * 1000
            pipe = poller.pipeline(transaction=True)
            pipe.zrangebyscore(args.key, "-inf", now_ms, withscores=True)
            pipe.zremrangebyscore(args.key, "-inf", now_ms)
            due, _ = pipe.execute()
            at_ms = time.time() * 1000
            if due:
                receipts[:] = [receipts[0] if receipts else at_ms, at_ms]
            for member, deadline_ms in due:
                count = received.get(member, 0)
                received[member] = count + 1
                if count == 0:
                    late = at_ms - deadline_ms
                    if late < 0:
                        early += 1
                    lateness.append(late)
            time.sleep(interval)

    poller_thread = threading.Thread(target=poll, daemon=True)
    poller_thread.start()

    start = time.monotonic()
    issued = 0
    last_deadline_ms = 0.0
    while issued < total:
        due = min(total, int((time.monotonic() - start) * args.rate))
        if due > issued:
            deadline_ms = time.time() * 1000 + args.delay_ms
            producer.zadd(args.key, {str(seq): deadline_ms for seq in range(issued, due)})
            last_deadline_ms = deadline_ms
            issued = due
        time.sleep(0.001)

    give_up_ms = last_deadline_ms + args.grace_ms
    while time.time() * 1000 < give_up_ms:
        if len(received) >= total and time.time() * 1000 >= last_deadline_ms:
            time.sleep(0.2)  # a moment more shows duplicates, if any
            break
        time.sleep(0.02)
    stop.set()
    poller_thread.join()

    lateness.sort()
    duplicated = sum(1 for count in received.values() if count > 1)
    span_s = (receipts[1] - receipts[0]) / 1000 if receipts else 0.0
    print(
        f"redis_poller interval_ms={args.interval_ms} rate={args.rate} registered={total} "
        f"fired_per_s={(len(lateness) / span_s if span_s > 0 else 0.0):.0f} "
        f"p50_late_ms={quantile(lateness, 0.50):.3f} "
        f"p99_late_ms={quantile(lateness, 0.99):.3f} "
        f"max_late_ms={(lateness[-1] if lateness else 0.0):.3f} "
        f"lost={total - len(received)} duplicated={duplicated} early={early}"
    )
    producer.delete(args.key)


if __name__ == "__main__":
    main()
