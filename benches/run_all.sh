#!/usr/bin/env bash
# Every tickd benchmark on this machine, one `name key=value ...` line each:
#   core       the wheel worker alone (and Netty's HashedWheelTimer on the same workload,
#              when ../shared/peers/netty/run and Java are there);
#   rpc        health Check (the empty-RPC ceiling), unary NewTimeout and NewTimeouts
#              batches, at $CONC callers, tickd in memory and with --sync always;
#   e2e        $RATE timers/s registered, fired, delivered and acknowledged, both modes;
#   keepalive  lease heartbeats over $CONC KeepAlive streams, both modes.
# Lines from a server run end with sync=MODE. A fresh server (fresh data dir) serves each
# group. The side-by-side etcd comparison is benches/etcd_compare.sh.
#
# Environment: SECS (10), CONC (64), BATCH (100), RATE (100000), DELAY_MS (1000),
# SUBSCRIBERS (4), LEASES (10000), CONNECTIONS (4), TIMERS (core: 1000000), SKIP (space-
# separated groups to leave out, e.g. "core e2e").
set -euo pipefail
cd "$(dirname "$0")/.."
source benches/lib.sh
trap bench_cleanup EXIT
trap 'exit 130' INT TERM

SECS=${SECS:-10}
CONC=${CONC:-64}
BATCH=${BATCH:-100}
RATE=${RATE:-100000}
DELAY_MS=${DELAY_MS:-1000}
SUBSCRIBERS=${SUBSCRIBERS:-4}
LEASES=${LEASES:-10000}
CONNECTIONS=${CONNECTIONS:-4}
TIMERS=${TIMERS:-1000000}
SKIP=${SKIP:-}

wanted() { [[ " $SKIP " != *" $1 "* ]]; }

cargo build --release --bin tickd-bench --bin tickd >&2
echo "# $(nproc) cores, load average $(load1)" >&2
common=(--connections "$CONNECTIONS" --secs "$SECS")

if wanted core; then
    "$BIN/tickd-bench" core --timers "$TIMERS" --max-delay-ms 2000 --tick-ms 1
    netty=../shared/peers/netty/run
    if [ -x "$netty" ] && command -v java >/dev/null 2>&1; then
        "$netty" "$TIMERS" 2000 1 || echo "# $netty failed" >&2
    else
        echo "# skipping $netty (missing, or no java)" >&2
    fi
fi

for sync in none always; do
    if wanted rpc; then
        for mode in health unary batch; do
            start_tickd "$sync"
            line=$("$BIN/tickd-bench" rpc --addr "$TICKD_URL" "${common[@]}" \
                --mode "$mode" --conc "$CONC" --batch "$BATCH")
            echo "$line sync=$sync"
            stop_tickd
        done
    fi
    if wanted e2e; then
        start_tickd "$sync"
        line=$("$BIN/tickd-bench" e2e --addr "$TICKD_URL" --connections "$CONNECTIONS" \
            --rate "$RATE" --secs "$SECS" --delay-ms "$DELAY_MS" --subscribers "$SUBSCRIBERS")
        echo "$line sync=$sync"
        stop_tickd
    fi
    if wanted keepalive; then
        start_tickd "$sync"
        line=$("$BIN/tickd-bench" keepalive --addr "$TICKD_URL" "${common[@]}" \
            --leases "$LEASES" --streams "$CONC")
        echo "$line sync=$sync"
        stop_tickd
    fi
done
