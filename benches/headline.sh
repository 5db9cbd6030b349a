#!/usr/bin/env bash
# The figures README.md's "Why tickd" table quotes, from one run on this machine, printed as
# that table (markdown, on stdout; progress and the scripts' raw lines on stderr).
#
# It runs the existing scripts rather than repeating them:
#   benches/run_all.sh with SKIP="rpc e2e keepalive"  the wheel core, and Netty's
#                                                      HashedWheelTimer on the same workload;
#   benches/redis_compare.sh                           registration and delivery lateness,
#                                                      against a Redis sorted set + poller;
#   benches/etcd_compare.sh                            lease heartbeats and creation,
#                                                      against etcd leases.
# A peer that cannot be installed or run here is reported as "not measured" with the reason,
# never given a figure. The scripts' environment variables (SECS, CONC, ...) pass through.
#
# Regenerate the README's table: benches/headline.sh > headline.md, then paste it.
set -uo pipefail
cd "$(dirname "$0")/.."
source benches/lib.sh
trap bench_cleanup EXIT
trap 'exit 130' INT TERM

raw="$BENCH_WORK/headline"
mkdir -p "$raw"

# run NAME COMMAND...: runs one script, its lines to $raw/NAME (and stderr), and notes a failure.
run() {
    local name=$1
    shift
    echo "# headline: $name: $*" >&2
    if ! "$@" >"$raw/$name" 2>"$raw/$name.err"; then
        echo "# headline: $name failed; its last lines:" >&2
        tail -n 5 "$raw/$name.err" >&2
        tail -n 5 "$raw/$name.err" | tr '\n' ' ' >"$raw/$name.failed"
    fi
    cat "$raw/$name" >&2
}

cargo build --release --bin tickd-bench --bin tickd >&2 || exit 1
started=$(date -u '+%Y-%m-%d %H:%M UTC')
commit=$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
if [ -n "$(git status --porcelain --untracked-files=no 2>/dev/null)" ]; then
    commit="$commit (with uncommitted changes)"
fi
cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1)
memory=$(awk '/^MemTotal:/ { printf "%.0f GiB", $2 / 1048576 }' /proc/meminfo)
load_before=$(load1)

run core env SKIP="rpc e2e keepalive" benches/run_all.sh
run redis benches/redis_compare.sh
run etcd benches/etcd_compare.sh

# line FILE WORD...: the first line of $raw/FILE that holds every WORD.
line() {
    local file=$raw/$1 found
    shift
    found=$(cat "$file" 2>/dev/null)
    local word
    for word in "$@"; do
        found=$(grep -F -- "$word" <<<"$found")
    done
    head -n 1 <<<"$found"
}
# value FILE KEY WORD...: KEY's value in that line, or "—" when there is none.
value() {
    local file=$1 key=$2 found
    shift 2
    found=$(field " $(line "$file" "$@")" "$key")
    echo "${found:-—}"
}
# thousands N: 1234567 as 1,234,567 (other text unchanged).
thousands() {
    sed ':a; s/\B[0-9]\{3\}\>/,&/; ta' <<<"$1"
}
# why PEER FILE PATTERN: "not measured" and the reason, when FILE's script failed or printed no peer line.
why() {
    local name=$1 file=$2 pattern=$3
    if [ -n "$(line "$file" "$pattern")" ]; then
        return 1
    fi
    local said
    said=$(grep -i -- "$name" "$raw/$file.err" 2>/dev/null | grep -v '^# headline' | tail -n 1)
    if [ -s "$raw/$file.failed" ]; then
        echo "not measured: $(cut -c1-120 "$raw/$file.failed")"
    elif [ -n "$said" ]; then
        echo "not measured: $(cut -c1-120 <<<"$said")"
    else
        echo "not measured: no $name figure printed"
    fi
}
peer() {
    local name=$1 file=$2 pattern=$3 figure=$4 reason
    if reason=$(why "$name" "$file" "$pattern"); then
        echo "$reason"
    else
        echo "$figure"
    fi
}

redis_version=$(value redis version redis_zadd)
etcd_version=$(value etcd version etcd_keepalive)
netty_p99=$(value core p99_late_ms netty)
netty_bytes=$(value core bytes_per_timer netty)

row() { printf '| %s | %s | %s | %s |\n' "$@"; }
echo "| what | tickd, in memory (\`--sync none\`) | tickd, durable (\`--sync always\`) | the usual alternative |"
echo "|---|---:|---:|---:|"
row "Delivery at $(thousands "${RATE:-5000}") timers/s: p99 lateness" \
    "$(value redis p99_late_ms tickd_e2e sync=none) ms" \
    "$(value redis p99_late_ms tickd_e2e sync=always) ms" \
    "$(peer Redis redis redis_poller "$(value redis p99_late_ms redis_poller) ms (Redis $redis_version sorted set, polled every ${INTERVAL_MS:-100} ms)")"
row "Batched registration (NewTimeouts × ${BATCH:-100}), timers/s" \
    "$(thousands "$(value redis timers_per_s tickd_rpc "mode=batch" "batch=${BATCH:-100} " sync=none)")" \
    "$(thousands "$(value redis timers_per_s tickd_rpc "mode=batch" "batch=${BATCH:-100} " sync=always)")" \
    "$(peer Redis redis "redis_zadd pipeline=${PIPELINE:-32}" "$(thousands "$(value redis ops_per_s "redis_zadd pipeline=${PIPELINE:-32}")") (ZADD pipelined ${PIPELINE:-32} deep, no persistence)")"
row "One registration per call (NewTimeout), /s" \
    "$(thousands "$(value redis timers_per_s tickd_rpc mode=unary sync=none)")" \
    "$(thousands "$(value redis timers_per_s tickd_rpc mode=unary sync=always)")" \
    "$(peer Redis redis "redis_zadd pipeline=1 " "$(thousands "$(value redis ops_per_s "redis_zadd pipeline=1 ")") (ZADD, no persistence)")"
row "Lease heartbeats, /s" \
    "$(thousands "$(value etcd heartbeats_per_s "keepalive " sync=none)")" \
    "$(thousands "$(value etcd heartbeats_per_s "keepalive " sync=always)")" \
    "$(peer etcd etcd etcd_keepalive "$(thousands "$(value etcd heartbeats_per_s etcd_keepalive)") (etcd $etcd_version LeaseKeepAlive, p99 $(value etcd p99_ms etcd_keepalive) ms)")"
row "Lease creation (NewTimeout against LeaseGrant), /s" \
    "$(thousands "$(value etcd timers_per_s "rpc " mode=unary sync=none)")" \
    "$(thousands "$(value etcd timers_per_s "rpc " mode=unary sync=always)")" \
    "$(peer etcd etcd etcd_grant "$(thousands "$(value etcd grants_per_s etcd_grant)") (etcd $etcd_version LeaseGrant)")"
row "The wheel alone, 1,000,000 timers over 2 s: p99 lateness" \
    "$(value core p99_late_ms "core ") ms" "" \
    "$(peer Netty core "netty " "$netty_p99 ms (Netty HashedWheelTimer)")"
row "The wheel alone: bytes per pending timer" \
    "$(value core bytes_per_timer "core ")" "" \
    "$(peer Netty core "netty " "$netty_bytes (Netty HashedWheelTimer)")"
echo
echo "Measured $started at commit $commit by \`benches/headline.sh\` on $(nproc) cores ($cpu),"
echo "$memory of memory, load average $load_before at the start; clients, servers and peers on the"
echo "same cores, ${CONC:-64} callers, ${SECS:-10} s a run."
