#!/usr/bin/env bash
# Push delivery beside Subscribe, in alternation on fresh servers (`--sync SYNC`): the
# same `tickd-bench e2e` registers RATE timers/s for SECS seconds, each due a second later,
# and receives them either as one Subscribe stream with a window of WINDOW deliveries, or
# as an HTTP sink (`--sink bench-push=http://ADDR/#protobuf --sink-max-in-flight WINDOW`)
# served by tickd-bench on loopback; HTTP=2 pushes over HTTP/2 (`#protobuf,h2c`). Each line
# ends with how=subscribe|push round=N ... http=1|2.
#
#   benches/push.sh                       # RATES="10000 50000", ROUNDS=3
#   ROUNDS=5 RATES=10000 benches/push.sh
#   SYNC=none RATES=10000 benches/push.sh  # lateness without the log's fsync
#   HTTP=2 WINDOW=256 RATES=50000 benches/push.sh
set -euo pipefail
cd "$(dirname "$0")/.."
BIN_GIVEN=${BIN:-}
source benches/lib.sh
trap bench_cleanup EXIT
trap 'exit 130' INT TERM

ROUNDS=${ROUNDS:-3}
RATES=${RATES:-"10000 50000"}
SECS=${SECS:-8}
WINDOW=${WINDOW:-64}
CONNECTIONS=${CONNECTIONS:-4}
SYNC=${SYNC:-always}
HTTP=${HTTP:-1}
case $HTTP in
    1) FRAGMENT='#protobuf' ;;
    2) FRAGMENT='#protobuf,h2c' ;;
    *) echo "HTTP is 1 or 2, not $HTTP" >&2; exit 2 ;;
esac

[ -n "${BIN_GIVEN:-}" ] || cargo build --release --bin tickd-bench --bin tickd >&2
echo "# $(nproc) cores, load average $(load1)" >&2

# one HOW RATE ROUND: a fresh server, one e2e run, its line tagged.
one() {
    local how=$1 rate=$2 round=$3 line sink_port
    local e2e=(e2e --connections "$CONNECTIONS" --rate "$rate" --secs "$SECS" --delay-ms 1000)
    if [ "$how" = push ]; then
        sink_port=$(free_port)
        start_tickd "$SYNC" --sink "bench-push=http://127.0.0.1:$sink_port/$FRAGMENT" \
            --sink-max-in-flight "$WINDOW"
        line=$("$BIN/tickd-bench" "${e2e[@]}" --addr "$TICKD_URL" \
            --push-listen "127.0.0.1:$sink_port" --namespace bench-push)
    else
        start_tickd "$SYNC"
        line=$("$BIN/tickd-bench" "${e2e[@]}" --addr "$TICKD_URL" \
            --subscribers 1 --max-unacked "$WINDOW")
    fi
    stop_tickd
    echo "$line how=$how round=$round window=$WINDOW sync=$SYNC http=$HTTP load=$(load1)"
}

for round in $(seq "$ROUNDS"); do
    for rate in $RATES; do
        if (( round % 2 )); then order=(subscribe push); else order=(push subscribe); fi
        for how in "${order[@]}"; do
            one "$how" "$rate" "$round"
        done
    done
done
