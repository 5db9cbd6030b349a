#!/usr/bin/env bash
# Two tickd builds side by side with --sync always: `rpc --mode batch` and `--mode unary`,
# in pairs (a fresh server and data directory per run, the order of each pair alternating
# per round), so a busy machine's drift falls on both alike. One `name key=value ...` line
# per run, tagged with the round, the build and the load average.
#
#   OLD=/path/to/old/tickd NEW=target/release/tickd benches/compare_builds.sh
#
# Environment: OLD, NEW (tickd binaries), ROUNDS (6), SECS (6), CONC (64), BATCH (100),
# CONNECTIONS (4). The client is this tree's tickd-bench.
set -euo pipefail
cd "$(dirname "$0")/.."
source benches/lib.sh
trap bench_cleanup EXIT
trap 'exit 130' INT TERM

OLD=${OLD:?the old tickd binary}
NEW=${NEW:-target/release/tickd}
ROUNDS=${ROUNDS:-6}
SECS=${SECS:-6}
CONC=${CONC:-64}
BATCH=${BATCH:-100}
CONNECTIONS=${CONNECTIONS:-4}

cargo build --release --bin tickd-bench >&2
echo "# $(nproc) cores, load average $(load1)" >&2

# run NAME BINARY MODE ROUND
run() {
    local name=$1 binary=$2 mode=$3 round=$4 line
    BIN=$(dirname "$binary") start_tickd always
    line=$("target/release/tickd-bench" rpc --addr "$TICKD_URL" --mode "$mode" \
        --secs "$SECS" --conc "$CONC" --batch "$BATCH" --connections "$CONNECTIONS")
    stop_tickd
    echo "$line round=$round build=$name load1=$(load1)"
}

for round in $(seq "$ROUNDS"); do
    for mode in batch unary; do
        if ((round % 2)); then
            run old "$OLD" "$mode" "$round"
            run new "$NEW" "$mode" "$round"
        else
            run new "$NEW" "$mode" "$round"
            run old "$OLD" "$mode" "$round"
        fi
    done
done
