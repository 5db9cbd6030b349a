#!/usr/bin/env bash
# Where a call's server CPU goes, as microseconds per call: `perf record` of the server while
# `tickd-bench rpc` drives it, for two workloads A and B (say the empty health Check and
# NewTimeout), each on a fresh server; then the difference, by thread and by symbol. The
# client runs on the same cores but is not recorded. Lines:
#   profile_total   a=.. b=.. a_us_per_call=.. b_us_per_call=..
#   profile_thread  name=.. a_us=.. b_us=..        per thread (tokio-rt-worker, tickd-wheel..)
#   profile_symbol  name=.. a_us=.. b_us=.. diff_us=..  the TOP symbols B spends most more on
# A and B are "MODE" or "MODE:SYNC" (rpc modes: health, unary, batch; sync: none, always).
#
#   benches/profile.sh                       # health:none against unary:none
#   CONC=256 benches/profile.sh unary:none unary:always
#
# Needs `perf` (Debian: linux-perf) and permission to record another process (root, or
# kernel.perf_event_paranoid <= 1). Environment: CONC (64), SECS (4: recorded seconds),
# CONNECTIONS (4), BATCH (100), TOP (25).
set -euo pipefail
cd "$(dirname "$0")/.."
BIN_GIVEN=${BIN:-}
source benches/lib.sh
trap bench_cleanup EXIT
trap 'exit 130' INT TERM

A=${1:-health:none}
B=${2:-unary:none}
CONC=${CONC:-64}
SECS=${SECS:-4}
CONNECTIONS=${CONNECTIONS:-4}
BATCH=${BATCH:-100}
TOP=${TOP:-25}

command -v perf >/dev/null || { echo "perf is missing: tests/tools/install-packages perf" >&2; exit 1; }
[ -n "${BIN_GIVEN:-}" ] || cargo build --release --bin tickd-bench --bin tickd >&2
echo "# $(nproc) cores, load average $(load1)" >&2

# record WORKLOAD OUT: the server's profile while the bench runs; prints the bench's line.
# The bench runs 2 s longer than the recording, which starts after its 1 s warm-up.
record() {
    local mode=${1%%:*} sync=${1#*:}
    [ "$sync" != "$1" ] || sync=none
    start_tickd "$sync"
    "$BIN/tickd-bench" rpc --addr "$TICKD_URL" --connections "$CONNECTIONS" \
        --secs $((SECS + 2)) --mode "$mode" --conc "$CONC" --batch "$BATCH" >"$2.line" &
    local bench=$!
    sleep 1.5
    perf record -F 4999 -p "$TICKD_PID" -o "$2" -- sleep "$SECS" >/dev/null 2>&1
    wait "$bench"
    stop_tickd
    cat "$2.line" >&2
}

record "$A" "$BENCH_WORK/a.data"
record "$B" "$BENCH_WORK/b.data"

python3 - "$BENCH_WORK" "$A" "$B" "$SECS" "$TOP" <<'EOF'
import re, subprocess, sys

work, name_a, name_b, secs, top = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4]), int(sys.argv[5])
SAMPLE_US = 1e6 / 4999

def samples(data, sort):
    """Samples per key of `perf report --sort SORT`."""
    out = subprocess.run(
        ["perf", "report", "-i", data, "--no-children", "--sort", sort, "--stdio", "-n", "-g", "none"],
        capture_output=True, text=True, check=True).stdout
    counts = {}
    for line in out.splitlines():
        match = re.match(r"\s+[\d.]+%\s+(\d+)\s+(.*)", line)
        if match:
            key = re.sub(r"^\[.\]\s+|(\s+-)+$", "", match.group(2).strip())
            counts[key] = counts.get(key, 0) + int(match.group(1))
    return counts

def calls(line_file):
    """Calls in the recorded window: the bench's rate times the recorded seconds."""
    line = open(line_file).read()
    return float(re.search(r"timers_per_s=([\d.]+)", line).group(1)) * secs

calls_a, calls_b = calls(f"{work}/a.data.line"), calls(f"{work}/b.data.line")
us = lambda count, n: count * SAMPLE_US / n if n else float("nan")
for sort, label in (("comm", "profile_thread"), ("symbol", "profile_symbol")):
    a, b = samples(f"{work}/a.data", sort), samples(f"{work}/b.data", sort)
    if sort == "comm":
        print(f"profile_total a={name_a} b={name_b} "
              f"a_us_per_call={us(sum(a.values()), calls_a):.2f} "
              f"b_us_per_call={us(sum(b.values()), calls_b):.2f}")
    keys = sorted(set(a) | set(b), key=lambda k: us(b.get(k, 0), calls_b) - us(a.get(k, 0), calls_a), reverse=True)
    for key in keys if sort == "comm" else keys[:top]:
        name = re.sub(r"\s+", "_", key)[:100]
        ua, ub = us(a.get(key, 0), calls_a), us(b.get(key, 0), calls_b)
        extra = "" if sort == "comm" else f" diff_us={ub - ua:+.3f}"
        print(f"{label} name={name} a_us={ua:.3f} b_us={ub:.3f}{extra}")
EOF
