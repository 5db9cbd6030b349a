#!/usr/bin/env bash
# The single node at its limits, as ratios measured side by side in one run (this machine is
# shared and noisy: absolute rates move between runs, ratios within a round much less).
# Each of ROUNDS rounds runs every line once, each against a fresh server, the client on the
# same cores:
#   rpc     health Check (the empty-RPC ceiling) and unary NewTimeout in memory, at 64 and
#           256 callers; NewTimeout with --sync always at 64 and 256; NewTimeouts of $BATCH
#           with --sync always;
#   e2e     $RATE timers/s registered, fired, delivered and acknowledged while $BACKGROUND
#           other timers are pending (due an hour later), in memory and with --sync always.
# Then one summary line per round:
#   limits round=N unary_vs_health_64=.. unary_vs_health_256=.. always_vs_none_64=..
#          always_vs_none_256=.. batch_always_per_s=.. e2e_p99_none_ms=.. e2e_p99_always_ms=..
# The order of health and unary alternates by round, so neither always gets the quieter
# moment.
#
# Environment: ROUNDS (5), SECS (5), CONNECTIONS (4), BATCH (100), RATE (100000),
# BACKGROUND (1000000), SKIP (groups to leave out: "rpc", "e2e").
set -euo pipefail
cd "$(dirname "$0")/.."
BIN_GIVEN=${BIN:-}
source benches/lib.sh
trap bench_cleanup EXIT
trap 'exit 130' INT TERM

ROUNDS=${ROUNDS:-5}
SECS=${SECS:-5}
CONNECTIONS=${CONNECTIONS:-4}
BATCH=${BATCH:-100}
RATE=${RATE:-100000}
BACKGROUND=${BACKGROUND:-1000000}
SKIP=${SKIP:-}

wanted() { [[ " $SKIP " != *" $1 "* ]]; }

# ratio2 A B: A / B with two decimals, or "nan".
ratio2() {
    awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "nan" }'
}

[ -n "${BIN_GIVEN:-}" ] || cargo build --release --bin tickd-bench --bin tickd >&2
echo "# $(nproc) cores, load average $(load1)" >&2

# rpc SYNC MODE CONC: one rpc line against a fresh server; prints it, sets LINE.
rpc() {
    start_tickd "$1"
    LINE=$("$BIN/tickd-bench" rpc --addr "$TICKD_URL" --connections "$CONNECTIONS" \
        --secs "$SECS" --mode "$2" --conc "$3" --batch "$BATCH")
    stop_tickd
    echo "$LINE sync=$1 round=$round"
}

# e2e SYNC: one e2e line beside the background timers; prints it, sets LINE.
e2e() {
    start_tickd "$1"
    LINE=$("$BIN/tickd-bench" e2e --addr "$TICKD_URL" --connections "$CONNECTIONS" \
        --rate "$RATE" --secs "$SECS" --delay-ms 1000 --subscribers 4 \
        --background "$BACKGROUND")
    stop_tickd
    echo "$LINE sync=$1 round=$round"
}

for round in $(seq "$ROUNDS"); do
    declare -A rate=()
    summary="limits round=$round"
    if wanted rpc; then
        if (( round % 2 )); then pair=(health unary); else pair=(unary health); fi
        for conc in 64 256; do
            for mode in "${pair[@]}"; do
                rpc none "$mode" "$conc"
                rate[none,$mode,$conc]=$(field "$LINE" timers_per_s)
            done
            rpc always unary "$conc"
            rate[always,unary,$conc]=$(field "$LINE" timers_per_s)
        done
        rpc always batch 64
        summary+=" unary_vs_health_64=$(ratio2 "${rate[none,unary,64]}" "${rate[none,health,64]}")"
        summary+=" unary_vs_health_256=$(ratio2 "${rate[none,unary,256]}" "${rate[none,health,256]}")"
        summary+=" always_vs_none_64=$(ratio2 "${rate[always,unary,64]}" "${rate[none,unary,64]}")"
        summary+=" always_vs_none_256=$(ratio2 "${rate[always,unary,256]}" "${rate[none,unary,256]}")"
        summary+=" batch_always_per_s=$(field "$LINE" timers_per_s)"
    fi
    if wanted e2e; then
        for sync in none always; do
            e2e "$sync"
            summary+=" e2e_p99_${sync}_ms=$(field "$LINE" p99_late_ms)"
        done
    fi
    echo "$summary"
done
