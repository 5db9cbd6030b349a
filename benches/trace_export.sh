#!/usr/bin/env bash
# The cost of trace export: each registration benchmark (`rpc` unary and batch, `e2e`) run
# in alternation with export off (no `traceparent`, no `--otlp-endpoint`, as by default) and
# with export on (every registration sent with a sampled `traceparent`, tickd exporting to
# examples/otlp_sink.rs, a receiver that counts spans and keeps none), each on a fresh
# server with --sync $SYNC. Each line ends with export=off|on round=N; an `on` round adds
# the receiver's `otlp_sink spans=N` line, the spans that reached it.
#
#   benches/trace_export.sh          # ROUNDS (3), SYNC (always), SECS (8), CONC (64),
#                                    # BATCH (100), RATE (50000), CONNECTIONS (4)
set -euo pipefail
cd "$(dirname "$0")/.."
source benches/lib.sh
trap bench_cleanup EXIT
trap 'exit 130' INT TERM

ROUNDS=${ROUNDS:-3}
SYNC=${SYNC:-always}
SECS=${SECS:-8}
CONC=${CONC:-64}
BATCH=${BATCH:-100}
RATE=${RATE:-50000}
CONNECTIONS=${CONNECTIONS:-4}
SAMPLED=00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01

cargo build --release --bin tickd-bench --bin tickd --example otlp_sink >&2
SINK_BIN=target/release/examples/otlp_sink
echo "# $(nproc) cores, load average $(load1)" >&2

# start_sink: the counting receiver, its URL in SINK_URL.
start_sink() {
    local out="$BENCH_WORK/otlp-sink-$1.out" i
    "$SINK_BIN" >"$out" 2>&1 &
    SINK_PID=$!
    BENCH_PIDS+=("$SINK_PID")
    SINK_OUT=$out
    for i in $(seq 100); do
        SINK_URL=$(sed -n 's/^otlp_sink addr=//p' "$out")
        [ -n "$SINK_URL" ] && return 0
        sleep 0.1
    done
    echo "otlp_sink did not start" >&2
    return 1
}

# bench EXPORT ROUND: every line once, against a fresh server, export off or on.
bench() {
    local export=$1 round=$2 mode line server=() client=()
    if [ "$export" = on ]; then
        start_sink "$round"
        server=(--otlp-endpoint "$SINK_URL")
        client=(--traceparent "$SAMPLED")
    fi
    for mode in unary batch; do
        start_tickd "$SYNC" "${server[@]}"
        line=$("$BIN/tickd-bench" rpc --addr "$TICKD_URL" --connections "$CONNECTIONS" \
            --secs "$SECS" --mode "$mode" --conc "$CONC" --batch "$BATCH" "${client[@]}")
        echo "$line export=$export round=$round"
        stop_tickd
    done
    start_tickd "$SYNC" "${server[@]}"
    line=$("$BIN/tickd-bench" e2e --addr "$TICKD_URL" --connections "$CONNECTIONS" \
        --rate "$RATE" --secs "$SECS" --delay-ms 1000 --subscribers 4 "${client[@]}")
    echo "$line export=$export round=$round"
    # SIGTERM exports what is queued before tickd exits, so the count below is complete.
    stop_tickd
    if [ "$export" = on ]; then
        kill -TERM "$SINK_PID"
        wait "$SINK_PID" 2>/dev/null || true
        echo "$(grep '^otlp_sink spans=' "$SINK_OUT") round=$round"
    fi
}

for round in $(seq "$ROUNDS"); do
    if (( round % 2 )); then order=(off on); else order=(on off); fi
    for export in "${order[@]}"; do
        bench "$export" "$round"
    done
done
