#!/usr/bin/env bash
# PostgreSQL and three tickd replicas on this machine, to try the replicated mode on one
# laptop: a throwaway PostgreSQL cluster (Debian's `postgresql` package, installed with
# apt-get when missing and run as root) on a free port of 127.0.0.1, a database `tickd`,
# and REPLICAS (3) `tickd --store postgres://...` processes, each on a free loopback port.
# It prints where everything listens and a tickctl command to try, then waits: Ctrl-C stops
# the replicas and PostgreSQL and removes the scratch directory (nothing is kept).
#
# Environment: REPLICAS (3), LEASE_TTL (10s), BIN (target/release: the tickd and tickctl
# used; built with cargo when it is the default). Extra arguments go to every replica, e.g.
# `deploy/local-replicas.sh --partitions 16`.
set -euo pipefail
cd "$(dirname "$0")/.."
# The helpers the benchmarks use to start PostgreSQL and replicas (free ports, Debian's
# layout, running postgres as the `postgres` user when we are root).
source benches/lib.sh
trap bench_cleanup EXIT
trap 'exit 130' INT TERM

REPLICAS=${REPLICAS:-3}
LEASE_TTL=${LEASE_TTL:-10s}

if ! ls -d /usr/lib/postgresql/*/bin >/dev/null 2>&1; then
    tests/tools/install-packages --why "deploy/local-replicas.sh" postgresql
fi
if [ "$BIN" = target/release ]; then
    cargo build --release --bin tickd --bin tickctl >&2
fi

start_postgres
psql -h 127.0.0.1 -p "$PG_PORT" -U postgres -qc 'CREATE DATABASE tickd'
REPLICA_URLS=()
REPLICA_PIDS=()
for i in $(seq "$REPLICAS"); do
    start_replica tickd "replica-$i" --lease-ttl "$LEASE_TTL" "$@"
done

cat <<EOT
PostgreSQL: postgres://postgres@127.0.0.1:$PG_PORT/tickd (psql -h 127.0.0.1 -p $PG_PORT -U postgres tickd)
Replicas:   ${REPLICA_URLS[*]}
Logs:       $BENCH_WORK

Try, in another shell (any replica serves any call):
  $BIN/tickctl --endpoint ${REPLICA_URLS[0]} -n demo add --delay 2s --payload hello
  $BIN/tickctl --endpoint ${REPLICA_URLS[$((REPLICAS - 1))]} -n demo consume --count 1
Stop one replica (kill ${REPLICA_PIDS[0]}) and its partitions move to the others within
$LEASE_TTL and a third. Ctrl-C stops everything.
EOT
# Until Ctrl-C. A replica that stops meanwhile (killed to watch a takeover, or on its own:
# its log is in the folder above) leaves the others running.
wait || true
