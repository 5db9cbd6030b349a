#!/usr/bin/env bash
# tickd and etcd side by side, on this machine, in one run:
#   - lease heartbeats: `tickd-bench etcd-keepalive` against etcd's LeaseKeepAlive and
#     `tickd-bench keepalive` against tickd's KeepAlive (same driver, same window);
#   - lease creation: `etcd-grant` (LeaseGrant) against `rpc --mode unary` (NewTimeout);
# at $STREAMS streams / callers, tickd in memory (--sync none) and with --sync always.
# etcd is Debian's etcd-server (installed if missing), single node, on 127.0.0.1 only, with
# a scratch data dir. Prints one line per run and a `ratio` line.
#
# Environment: STREAMS (64), LEASES (10000), SECS (10), WINDOW (64), CONNECTIONS (4).
set -euo pipefail
cd "$(dirname "$0")/.."
source benches/lib.sh
trap bench_cleanup EXIT
trap 'exit 130' INT TERM

STREAMS=${STREAMS:-64}
LEASES=${LEASES:-10000}
SECS=${SECS:-10}
WINDOW=${WINDOW:-64}
CONNECTIONS=${CONNECTIONS:-4}

if ! command -v etcd >/dev/null 2>&1; then
    tests/tools/install-packages --why "benches/etcd_compare.sh" etcd
fi
cargo build --release --bin tickd-bench --bin tickd >&2

# etcd: single member, client and peer URLs on loopback only.
client_port=$(free_port)
peer_port=$(free_port)
etcd --name tickd-bench --data-dir "$BENCH_WORK/etcd" \
    --listen-client-urls "http://127.0.0.1:$client_port" \
    --advertise-client-urls "http://127.0.0.1:$client_port" \
    --listen-peer-urls "http://127.0.0.1:$peer_port" \
    --initial-advertise-peer-urls "http://127.0.0.1:$peer_port" \
    --initial-cluster "tickd-bench=http://127.0.0.1:$peer_port" \
    --initial-cluster-state new \
    >"$BENCH_WORK/etcd.log" 2>&1 &
ETCD_PID=$!
BENCH_PIDS+=("$ETCD_PID")
ETCD_URL="http://127.0.0.1:$client_port"
wait_port "$client_port"
# A single member elects itself in about a second; wait until it answers as healthy.
for _ in $(seq 100); do
    if curl -fsS "$ETCD_URL/health" 2>/dev/null | grep -q '"health":"true"'; then
        break
    fi
    sleep 0.2
done
etcd_version=$(etcd --version 2>/dev/null | sed -n 's/^etcd Version: //p')
echo "# etcd $etcd_version on $ETCD_URL, load average $(load1)" >&2

common=(--connections "$CONNECTIONS" --secs "$SECS")

etcd_keepalive=$("$BIN/tickd-bench" etcd-keepalive --addr "$ETCD_URL" "${common[@]}" \
    --leases "$LEASES" --streams "$STREAMS" --window "$WINDOW")
echo "$etcd_keepalive version=$etcd_version"
etcd_grant=$("$BIN/tickd-bench" etcd-grant --addr "$ETCD_URL" "${common[@]}" --conc "$STREAMS")
echo "$etcd_grant version=$etcd_version"
# etcd is idle from here on; stop it so that it takes no CPU from tickd's runs.
kill "$ETCD_PID" 2>/dev/null || true
wait "$ETCD_PID" 2>/dev/null || true

declare -A keepalive unary
for sync in none always; do
    start_tickd "$sync"
    line=$("$BIN/tickd-bench" keepalive --addr "$TICKD_URL" "${common[@]}" \
        --leases "$LEASES" --streams "$STREAMS" --window "$WINDOW")
    echo "$line sync=$sync"
    keepalive[$sync]=$(field "$line" heartbeats_per_s)
    line=$("$BIN/tickd-bench" rpc --addr "$TICKD_URL" "${common[@]}" --mode unary --conc "$STREAMS")
    echo "$line sync=$sync"
    unary[$sync]=$(field "$line" timers_per_s)
    stop_tickd
done

etcd_heartbeats=$(field "$etcd_keepalive" heartbeats_per_s)
etcd_grants=$(field "$etcd_grant" grants_per_s)
echo "ratio keepalive_none=$(ratio "${keepalive[none]}" "$etcd_heartbeats")" \
    "keepalive_always=$(ratio "${keepalive[always]}" "$etcd_heartbeats")" \
    "newtimeout_vs_grant_none=$(ratio "${unary[none]}" "$etcd_grants")" \
    "newtimeout_vs_grant_always=$(ratio "${unary[always]}" "$etcd_grants")"
