#!/usr/bin/env bash
# This build's service benchmarks side by side with an earlier build, in alternation, so
# both see the same (shared, noisy) machine: for each of ROUNDS rounds, every line of
# `rpc` (unary, batch), `e2e` and `keepalive` runs once on the base and once on this build,
# each on a fresh server with --sync $SYNC. Each line ends with build=base|this round=N.
#
#   BASE=/path/to/old/target/release/tickd benches/compare_builds.sh
#   BIN=/path/to/new/release BASE=... benches/compare_builds.sh   # prebuilt, no cargo build
#
# A base build: `git worktree add /tmp/base <commit> && cargo build --release --bin tickd`
# there. Environment: BASE (required), ROUNDS (3), SYNC (always), SECS (8), CONC (64),
# BATCH (100), RATE (50000), CONNECTIONS (4), LEASES (10000).
set -euo pipefail
cd "$(dirname "$0")/.."
BIN_GIVEN=${BIN:-}
source benches/lib.sh
trap bench_cleanup EXIT
trap 'exit 130' INT TERM

: "${BASE:?set BASE to the tickd binary of the build to compare with}"
ROUNDS=${ROUNDS:-3}
SYNC=${SYNC:-always}
SECS=${SECS:-8}
CONC=${CONC:-64}
BATCH=${BATCH:-100}
RATE=${RATE:-50000}
CONNECTIONS=${CONNECTIONS:-4}
LEASES=${LEASES:-10000}

# BIN set: compare binaries built elsewhere (say, kept while the tree moves on).
[ -n "${BIN_GIVEN:-}" ] || cargo build --release --bin tickd-bench --bin tickd >&2
echo "# $(nproc) cores, load average $(load1), base $BASE" >&2
common=(--connections "$CONNECTIONS" --secs "$SECS")

# bench BUILD ROUND: every line once against a fresh server of BUILD.
bench() {
    local build=$1 round=$2 mode line
    if [ "$build" = base ]; then TICKD_BIN=$BASE; else TICKD_BIN=$BIN/tickd; fi
    for mode in unary batch; do
        start_tickd "$SYNC"
        line=$("$BIN/tickd-bench" rpc --addr "$TICKD_URL" "${common[@]}" \
            --mode "$mode" --conc "$CONC" --batch "$BATCH")
        echo "$line build=$build round=$round"
        stop_tickd
    done
    start_tickd "$SYNC"
    line=$("$BIN/tickd-bench" e2e --addr "$TICKD_URL" --connections "$CONNECTIONS" \
        --rate "$RATE" --secs "$SECS" --delay-ms 1000 --subscribers 4)
    echo "$line build=$build round=$round"
    stop_tickd
    start_tickd "$SYNC"
    line=$("$BIN/tickd-bench" keepalive --addr "$TICKD_URL" "${common[@]}" \
        --leases "$LEASES" --streams "$CONC")
    echo "$line build=$build round=$round"
    stop_tickd
}

for round in $(seq "$ROUNDS"); do
    # Alternate which build goes first, so neither always gets the quieter moment.
    if (( round % 2 )); then order=(base this); else order=(this base); fi
    for build in "${order[@]}"; do
        bench "$build" "$round"
    done
done
