#!/usr/bin/env bash
# Push sinks on message brokers: tickd (`--sync always`) pushing a namespace to a NATS
# JetStream subject (`nats-server -js`, file storage) or to a Redis stream (`redis-server`,
# append-only file fsynced every second), each on a fresh server, while `tickd-bench e2e`
# registers RATE timers/s for SECS seconds, each due a second later, and reads the
# expirations back from the broker as they arrive (`--push-from URL`: a core subscription
# on the subject, or XREAD BLOCK on the stream). One line per run:
#
#   push_nats rate=R delivered_per_s=D p50_ms=.. p99_ms=.. max_ms=.. lost=L duplicated=U round=N
#   push_redis ...
#
# p*_ms is lateness: the read-back wall time minus the deadline (so it includes the
# broker's hop back to a consumer). Debian's nats-server and redis-server are needed.
#
#   benches/push_brokers.sh                       # RATES=10000, ROUNDS=3
#   ROUNDS=5 RATES="5000 20000" benches/push_brokers.sh
set -euo pipefail
cd "$(dirname "$0")/.."
BIN_GIVEN=${BIN:-}
source benches/lib.sh
trap bench_cleanup EXIT
trap 'exit 130' INT TERM

ROUNDS=${ROUNDS:-3}
RATES=${RATES:-10000}
SECS=${SECS:-8}
WINDOW=${WINDOW:-64}
CONNECTIONS=${CONNECTIONS:-4}
NATS_SERVER=${NATS_SERVER:-$(command -v nats-server || echo /usr/sbin/nats-server)}
REDIS_SERVER=${REDIS_SERVER:-$(command -v redis-server || echo /usr/bin/redis-server)}

[ -n "${BIN_GIVEN:-}" ] || cargo build --release --bin tickd-bench --bin tickd >&2
echo "# $(nproc) cores, load average $(load1)" >&2

# start_broker nats|redis: a fresh server on a free port; sets BROKER_URL and BROKER_PID.
start_broker() {
    local port dir
    port=$(free_port)
    dir="$BENCH_WORK/$1-$port"
    mkdir -p "$dir"
    if [ "$1" = nats ]; then
        "$NATS_SERVER" -js -a 127.0.0.1 -p "$port" -sd "$dir" >"$dir/log" 2>&1 &
        BROKER_URL="nats://127.0.0.1:$port/tickd.bench"
    else
        "$REDIS_SERVER" --bind 127.0.0.1 --port "$port" --save "" --appendonly yes \
            --appendfsync everysec --dir "$dir" >"$dir/log" 2>&1 &
        BROKER_URL="redis://127.0.0.1:$port/tickd-bench"
    fi
    BROKER_PID=$!
    BENCH_PIDS+=("$BROKER_PID")
    wait_port "$port"
}

# one nats|redis RATE ROUND: fresh broker and server, one e2e run, its line.
one() {
    local broker=$1 rate=$2 round=$3 line
    start_broker "$broker"
    start_tickd always --sink "bench-push=$BROKER_URL#protobuf" --sink-max-in-flight "$WINDOW"
    line=$("$BIN/tickd-bench" e2e --connections "$CONNECTIONS" --rate "$rate" --secs "$SECS" \
        --delay-ms 1000 --addr "$TICKD_URL" --push-from "$BROKER_URL" --namespace bench-push)
    stop_tickd
    stop_processes "$BROKER_PID"
    echo "push_$broker rate=$rate delivered_per_s=$(field "$line" fired_per_s)" \
        "p50_ms=$(field "$line" p50_late_ms) p99_ms=$(field "$line" p99_late_ms)" \
        "max_ms=$(field "$line" max_late_ms) lost=$(field "$line" lost)" \
        "duplicated=$(field "$line" duplicated) errors=$(field "$line" errors)" \
        "round=$round window=$WINDOW load=$(load1)"
}

for round in $(seq "$ROUNDS"); do
    for rate in $RATES; do
        if (( round % 2 )); then order=(nats redis); else order=(redis nats); fi
        for broker in "${order[@]}"; do
            one "$broker" "$rate" "$round"
        done
    done
done
