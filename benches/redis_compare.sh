#!/usr/bin/env bash
# tickd and the usual Redis timer (a sorted set scored by deadline, plus a poller) side by
# side, on this machine, in one run:
#   - registration rate at $CONC concurrent callers:
#       redis-benchmark ZADD unpipelined      vs  tickd-bench rpc --mode unary (NewTimeout);
#       redis-benchmark ZADD pipelined -P $PIPELINE  vs  tickd-bench rpc --mode batch
#       (NewTimeouts of $PIPELINE timers, and of $BATCH);
#     plus tickd's empty-RPC ceiling (health Check) for reference;
#   - delivery lateness at $RATE timers/s, each due $DELAY_MS after registration:
#       benches/redis/zset_poller.py (ZRANGEBYSCORE+ZREMRANGEBYSCORE every $INTERVAL_MS)
#       vs  tickd-bench e2e (Subscribe, acknowledged).
# tickd runs in memory (--sync none, the like-for-like with a Redis without persistence) and
# with --sync always; a fresh server serves each run. Redis is Debian's redis-server
# (installed if missing) on 127.0.0.1 and a free port, with no RDB and no AOF.
# Prints one `name key=value ...` line per measurement (tickd lines end with sync=MODE),
# a `redis_compare` line of ratios, and a summary table (stdout; progress on stderr).
#
# The poller needs python3 with venv: target/redis-bench-venv is built from
# benches/redis/requirements.txt (PyPI the first time).
#
# Environment: SECS (10), CONC (64), PIPELINE (32), BATCH (100), CONNECTIONS (4),
# RATE (5000), DELAY_MS (1000), INTERVAL_MS (100), SUBSCRIBERS (1).
set -euo pipefail
cd "$(dirname "$0")/.."
source benches/lib.sh
trap bench_cleanup EXIT
trap 'exit 130' INT TERM

SECS=${SECS:-10}
CONC=${CONC:-64}
PIPELINE=${PIPELINE:-32}
BATCH=${BATCH:-100}
CONNECTIONS=${CONNECTIONS:-4}
RATE=${RATE:-5000}
DELAY_MS=${DELAY_MS:-1000}
INTERVAL_MS=${INTERVAL_MS:-100}
SUBSCRIBERS=${SUBSCRIBERS:-1}

if ! command -v redis-server >/dev/null 2>&1 || ! command -v redis-benchmark >/dev/null 2>&1; then
    tests/tools/install-packages --why "benches/redis_compare.sh" redis
fi
cargo build --release --bin tickd-bench --bin tickd >&2
if ! "$BIN/tickd-bench" rpc --help >/dev/null 2>&1 || ! "$BIN/tickd-bench" e2e --help >/dev/null 2>&1; then
    echo "tickd-bench has no rpc or e2e subcommand" >&2
    exit 1
fi

# The poller's venv, rebuilt when the requirements change.
VENV=target/redis-bench-venv
REQUIREMENTS=benches/redis/requirements.txt
wanted_marker=$(sha256sum "$REQUIREMENTS" | cut -d' ' -f1)
if [ "$(cat "$VENV/.requirements-sha256" 2>/dev/null)" != "$wanted_marker" ]; then
    echo "# building $VENV" >&2
    rm -rf "$VENV"
    python3 -m venv "$VENV" >&2
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check -r "$REQUIREMENTS" >&2
    echo "$wanted_marker" >"$VENV/.requirements-sha256"
fi

# Redis: loopback only, nothing written to disk.
redis_port=$(free_port)
mkdir -p "$BENCH_WORK/redis"
redis-server --bind 127.0.0.1 --port "$redis_port" --save '' --appendonly no \
    --dir "$BENCH_WORK/redis" --daemonize no --logfile "$BENCH_WORK/redis.log" &
REDIS_PID=$!
BENCH_PIDS+=("$REDIS_PID")
wait_port "$redis_port"
for _ in $(seq 100); do
    if [ "$(redis-cli -p "$redis_port" ping 2>/dev/null)" = PONG ]; then
        break
    fi
    sleep 0.1
done
redis_version=$(redis-server --version | sed -n 's/.* v=\([^ ]*\).*/\1/p')
echo "# redis $redis_version on 127.0.0.1:$redis_port; $(nproc) cores, load average $(load1)" >&2

# redis_zadd DEPTH REQUESTS: one redis-benchmark ZADD run at $CONC clients, as a line.
redis_zadd() {
    local depth=$1 requests=$2 csv
    redis-cli -p "$redis_port" flushall >/dev/null
    csv=$(redis-benchmark -h 127.0.0.1 -p "$redis_port" -t zadd -c "$CONC" -P "$depth" \
        -n "$requests" -r 1000000 --csv | tail -n 1)
    # "ZADD","rps","avg_ms","min_ms","p50_ms","p95_ms","p99_ms","max_ms"
    awk -F'","' -v depth="$depth" -v conc="$CONC" -v requests="$requests" -v version="$redis_version" '{
        gsub(/"/, "", $0); split($0, f, ",");
        printf "redis_zadd pipeline=%s conc=%s requests=%s ops_per_s=%.0f p50_ms=%s p99_ms=%s version=%s\n",
            depth, conc, requests, f[2], f[5], f[7], version
    }' <<<"$csv"
}

# sized_zadd DEPTH: a short calibration run (also the warm-up), then a run sized to take
# about $SECS seconds at the rate it found (redis-benchmark counts requests, not time).
sized_zadd() {
    local depth=$1 calibration rate
    calibration=$(redis_zadd "$depth" $((depth == 1 ? 50000 : 500000)))
    rate=$(field "$calibration" ops_per_s)
    redis_zadd "$depth" $((rate * SECS))
}
zadd1=$(sized_zadd 1)
echo "$zadd1"
zaddp=$(sized_zadd "$PIPELINE")
echo "$zaddp"
redis-cli -p "$redis_port" flushall >/dev/null
poller=$("$VENV/bin/python" benches/redis/zset_poller.py --port "$redis_port" --rate "$RATE" \
    --secs "$SECS" --delay-ms "$DELAY_MS" --interval-ms "$INTERVAL_MS")
echo "$poller version=$redis_version"
# Redis is idle from here on; stop it so that it takes nothing from tickd's runs.
kill "$REDIS_PID" 2>/dev/null || true
wait "$REDIS_PID" 2>/dev/null || true

common=(--connections "$CONNECTIONS" --secs "$SECS")
declare -A result
for sync in none always; do
    for run in health unary "batch $PIPELINE" "batch $BATCH"; do
        read -r mode size <<<"$run"
        start_tickd "$sync"
        line=$("$BIN/tickd-bench" rpc --addr "$TICKD_URL" "${common[@]}" \
            --mode "$mode" --conc "$CONC" --batch "${size:-$BATCH}")
        if [ "$mode" = batch ]; then
            line="$line batch=$size"
        fi
        echo "tickd_$line sync=$sync"
        result[$sync,$mode${size:+_$size}]=$line
        stop_tickd
    done
    start_tickd "$sync"
    line=$("$BIN/tickd-bench" e2e --addr "$TICKD_URL" --connections "$CONNECTIONS" \
        --rate "$RATE" --secs "$SECS" --delay-ms "$DELAY_MS" --subscribers "$SUBSCRIBERS")
    echo "tickd_$line sync=$sync"
    result[$sync,e2e]=$line
    stop_tickd
done

# Ratios and the summary.
get() { field "${result[$1]}" "$2"; }
zadd1_rate=$(field "$zadd1" ops_per_s)
zaddp_rate=$(field "$zaddp" ops_per_s)
poller_p99=$(field "$poller" p99_late_ms)
echo "redis_compare unary_vs_zadd=$(ratio "$(get none,unary timers_per_s)" "$zadd1_rate")" \
    "unary_vs_health=$(ratio "$(get none,unary timers_per_s)" "$(get none,health timers_per_s)")" \
    "batch${PIPELINE}_vs_pipelined=$(ratio "$(get none,batch_$PIPELINE timers_per_s)" "$zaddp_rate")" \
    "batch${BATCH}_vs_pipelined=$(ratio "$(get none,batch_$BATCH timers_per_s)" "$zaddp_rate")" \
    "poller_p99_vs_subscribe_p99=$(ratio "$poller_p99" "$(get none,e2e p99_late_ms)")" \
    "poller_p99_vs_subscribe_p99_always=$(ratio "$poller_p99" "$(get always,e2e p99_late_ms)")"

row() { printf '| %-44s | %14s | %17s | %17s |\n' "$@"; }
{
    echo
    echo "Redis $redis_version (no persistence) vs tickd, $(nproc) cores, $CONC callers, ${SECS}s runs:"
    echo
    row "measurement" "Redis" "tickd sync=none" "tickd sync=always"
    row "---" "---:" "---:" "---:"
    row "empty-RPC ceiling (health Check), calls/s" "" \
        "$(get none,health timers_per_s)" "$(get always,health timers_per_s)"
    row "register one: ZADD vs NewTimeout, /s" "$zadd1_rate" \
        "$(get none,unary timers_per_s)" "$(get always,unary timers_per_s)"
    row "  p99 latency, ms" "$(field "$zadd1" p99_ms)" \
        "$(get none,unary p99_ms)" "$(get always,unary p99_ms)"
    row "ZADD -P $PIPELINE vs NewTimeouts x$PIPELINE, timers/s" "$zaddp_rate" \
        "$(get none,batch_$PIPELINE timers_per_s)" "$(get always,batch_$PIPELINE timers_per_s)"
    row "ZADD -P $PIPELINE vs NewTimeouts x$BATCH, timers/s" "$zaddp_rate" \
        "$(get none,batch_$BATCH timers_per_s)" "$(get always,batch_$BATCH timers_per_s)"
    row "delivery at $RATE/s: p50 lateness, ms" "$(field "$poller" p50_late_ms)" \
        "$(get none,e2e p50_late_ms)" "$(get always,e2e p50_late_ms)"
    row "  p99 lateness, ms" "$poller_p99" \
        "$(get none,e2e p99_late_ms)" "$(get always,e2e p99_late_ms)"
    row "  max lateness, ms" "$(field "$poller" max_late_ms)" \
        "$(get none,e2e max_late_ms)" "$(get always,e2e max_late_ms)"
    row "  lost / duplicated" "$(field "$poller" lost) / $(field "$poller" duplicated)" \
        "$(get none,e2e lost) / $(get none,e2e duplicated)" \
        "$(get always,e2e lost) / $(get always,e2e duplicated)"
    echo
    echo "Redis delivery is a ZSET poller every ${INTERVAL_MS} ms; tickd's is Subscribe (acknowledged)."
}
