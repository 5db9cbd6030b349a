#!/usr/bin/env bash
# Replicated tickd on PostgreSQL: aggregate registration and firing with 1, 2 and 3
# replicas on one database, failover time, and the database's cost per timer; the same
# workload on one tickd with its local log (--sync always) for reference. One line each:
#   replicas_register  n=.. timers_per_s=..        NewTimeouts batches spread over the replicas
#   replicas_e2e       n=.. fired_per_s=.. p99_late_ms=.. lost=.. duplicated=..
#   replicas_cost      n=.. table_bytes_per_timer=.. wal_bytes_per_timer=..
#   replicas_failover  lease_ttl=.. takeover_s=..  SIGKILL of one of 3 replicas until every
#                                                  partition it held is owned by another
#   replicas_statement n=.. calls=.. plan_ms_per_call=.. exec_ms_per_call=.. rows_per_call=..
#                      statement=..                with STATEMENTS=1: the database's five
#                                                  costliest statements during the e2e run
#                                                  (pg_stat_statements, planning tracked)
#   replicas_backend   n=.. backends=.. cores=.. cpu_us_per_timer=.. statement=..
#                                                  with BACKENDS=1: the CPU of the database
#                                                  connections open through the middle of
#                                                  the e2e run, by what they run
#                                                  (/proc/PID/stat; autovacuum not counted)
# A fresh database serves each replica count. PostgreSQL runs with its durable defaults.
#
# Environment: SECS (10), CONC (64), BATCH (100), RATE (5000), DELAY_MS (1000),
# SUBSCRIBERS (6), LEASE_TTL (10s), PARTITIONS (64), COUNTS (replica counts: "1 2 3";
# the failover runs with 3), REFERENCE (1: also the single-node reference; 0: not),
# STATEMENTS (0; 1: the replicas_statement lines, at a small cost to every statement),
# BACKENDS (0; 1: the replicas_backend lines),
# DEAD (0; N: before the e2e run, N dead expirations in ten other namespaces, as a full
# buffer records them: a dead list at the default --max-dead-total of 100,000).
set -euo pipefail
cd "$(dirname "$0")/.."
source benches/lib.sh
trap bench_cleanup EXIT
trap 'exit 130' INT TERM

SECS=${SECS:-10}
CONC=${CONC:-64}
BATCH=${BATCH:-100}
RATE=${RATE:-5000}
DELAY_MS=${DELAY_MS:-1000}
SUBSCRIBERS=${SUBSCRIBERS:-6}
LEASE_TTL=${LEASE_TTL:-10s}
PARTITIONS=${PARTITIONS:-64}
COUNTS=${COUNTS:-1 2 3}
REFERENCE=${REFERENCE:-1}
STATEMENTS=${STATEMENTS:-0}
BACKENDS=${BACKENDS:-0}
DEAD=${DEAD:-0}
if [ "$STATEMENTS" = 1 ]; then
    PG_OPTIONS="-c shared_preload_libraries=pg_stat_statements -c pg_stat_statements.track_planning=on"
fi

cargo build --release --bin tickd-bench --bin tickd >&2
echo "# $(nproc) cores, load average $(load1)" >&2
start_postgres

# start_cluster N: a fresh database and N replicas on it; sets ADDRS and DATABASE.
start_cluster() {
    local n=$1 i
    DATABASE="tickd_n${n}_$RANDOM"
    psql_value "CREATE DATABASE $DATABASE" >/dev/null
    REPLICA_URLS=()
    REPLICA_PIDS=()
    for i in $(seq "$n"); do
        start_replica "$DATABASE" "r$i" --partitions "$PARTITIONS" --lease-ttl "$LEASE_TTL"
    done
    ADDRS=$(IFS=,; echo "${REPLICA_URLS[*]}")
    # Every partition owned: the cluster is settled.
    until [ "$(psql_value "SELECT count(*) FROM tickd_partitions WHERE owner IS NULL" "$DATABASE" 2>/dev/null)" = 0 ]; do
        sleep 0.1
    done
}

stop_cluster() {
    stop_processes "${REPLICA_PIDS[@]}"
}

# dead_list N: N dead expirations in $DATABASE, as a full buffer records them (attempts
# 65535; marked dead where the schema has the mark, as the firing statement marks them).
dead_list() {
    psql_value "INSERT INTO tickd_expirations
                    (namespace, timer_id, payload, deadline, fired_at, fired_count, late, attempts)
                SELECT 'dead-' || (n % 10), n, '', n, n, 1, false, 65535
                FROM generate_series(1, $1) n" "$DATABASE" >/dev/null
    if [ "$(psql_value "SELECT count(*) FROM information_schema.columns
                        WHERE table_name = 'tickd_expirations' AND column_name = 'dead'" "$DATABASE")" = 1 ]; then
        psql_value "UPDATE tickd_expirations SET dead = true WHERE attempts = 65535" "$DATABASE" >/dev/null
    fi
    psql_value "ANALYZE tickd_expirations" "$DATABASE" >/dev/null
}

wal_lsn() {
    psql_value "SELECT pg_current_wal_lsn() - '0/0'::pg_lsn"
}

# statements N: one replicas_statement line for each of the five statements that took the
# most database time (planning and execution) since the last reset, in $DATABASE.
statements() {
    psql_value "SELECT format('replicas_statement n=$1 calls=%s plan_ms_per_call=%s exec_ms_per_call=%s rows_per_call=%s statement=\"%s\"',
                   calls, round((total_plan_time / calls)::numeric, 3),
                   round((mean_exec_time)::numeric, 3), round(rows::numeric / calls, 1),
                   left(regexp_replace(query, '\s+', ' ', 'g'), 48))
                FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
                ORDER BY total_plan_time + total_exec_time DESC LIMIT 5" "$DATABASE"
}

# backend_cpu: "pid cpu-ticks" of each server process of $DATABASE, sorted for join.
backend_cpu() {
    local pid
    for pid in $(pgrep -f "postgres: .* $DATABASE " || true); do
        awk -v pid="$pid" '{ sub(/.*\) /, ""); split($0, f, " "); print pid, f[12] + f[13] }' \
            "/proc/$pid/stat" 2>/dev/null || true
    done | LC_ALL=C sort -k1,1
}

# backends N SECONDS: while the e2e run is under way, the CPU each kind of connection
# took over SECONDS, from its first firings on, as replicas_backend lines. Connections
# keep to one job (firing, registering, acks, listening, claims), so the statement a
# connection ran last names what its CPU went to.
backends() {
    local before after
    sleep $((DELAY_MS / 1000 + 1))
    before=$(backend_cpu)
    sleep "$2"
    after=$(backend_cpu)
    if [ -z "$before" ]; then
        echo "# no server process of $DATABASE found (pgrep -f 'postgres: .* $DATABASE ')" >&2
        return 1
    fi
    psql_value "SELECT pid, left(regexp_replace(query, '\s+', ' ', 'g'), 40)
                FROM pg_stat_activity WHERE datname = current_database()
                AND pid <> pg_backend_pid()" "$DATABASE" | sed 's/|/ /' | LC_ALL=C sort -k1,1 |
        LC_ALL=C join <(LC_ALL=C join <(echo "$before") <(echo "$after") | awk '{ print $1, $3 - $2 }') - |
        awk -v n="$1" -v secs="$2" -v rate="$RATE" -v hz="$(getconf CLK_TCK)" '
            { ticks = $2; $1 = ""; $2 = ""; sub(/^ +/, ""); cpu[$0] += ticks; count[$0]++ }
            END { for (q in cpu) printf "replicas_backend n=%s backends=%d cores=%.2f cpu_us_per_timer=%.1f statement=\"%s\"\n",
                      n, count[q], cpu[q] / hz / secs, cpu[q] / hz / (secs * rate) * 1e6, q }' |
        LC_ALL=C sort -t= -k4 -rn
}

for n in $COUNTS; do
    start_cluster "$n"
    wal_before=$(wal_lsn)
    line=$("$BIN/tickd-bench" rpc --addr "$ADDRS" --connections 6 --secs "$SECS" \
        --mode batch --conc "$CONC" --batch "$BATCH")
    wal_after=$(wal_lsn)
    echo "replicas_register n=$n ${line#* }"
    timers=$(psql_value "SELECT count(*) FROM tickd_timers" "$DATABASE")
    table_bytes=$(psql_value "SELECT pg_total_relation_size('tickd_timers')" "$DATABASE")
    if [ "$STATEMENTS" = 1 ]; then
        psql_value "CREATE EXTENSION IF NOT EXISTS pg_stat_statements" "$DATABASE" >/dev/null
        psql_value "SELECT pg_stat_statements_reset()" "$DATABASE" >/dev/null
    fi
    [ "$DEAD" = 0 ] || dead_list "$DEAD"
    wal_before_e2e=$(wal_lsn)
    sampled="$BENCH_WORK/backends"
    if [ "$BACKENDS" = 1 ]; then
        # From the first firings (DELAY_MS) on, ending before the last.
        backends "$n" $((SECS > 6 ? SECS - 4 : 2)) >"$sampled" &
        sampler=$!
    fi
    line=$("$BIN/tickd-bench" e2e --addr "$ADDRS" --connections 6 --rate "$RATE" \
        --secs "$SECS" --delay-ms "$DELAY_MS" --subscribers "$SUBSCRIBERS")
    wal_after_e2e=$(wal_lsn)
    echo "replicas_e2e n=$n ${line#* }"
    registered=$(field "$line" registered)
    echo "replicas_cost n=$n table_bytes_per_timer=$(ratio "$table_bytes" "$timers")" \
        "register_wal_bytes_per_timer=$(ratio $((wal_after - wal_before)) "$timers")" \
        "lifecycle_wal_bytes_per_timer=$(ratio $((wal_after_e2e - wal_before_e2e)) "$registered")"
    [ "$STATEMENTS" != 1 ] || statements "$n"
    if [ "$BACKENDS" = 1 ]; then
        wait "$sampler" || echo "# sampling the database's CPU failed" >&2
        cat "$sampled"
    fi
    if [ "$n" = 3 ]; then
        victim=${REPLICA_PIDS[2]}
        held=$(psql_value "SELECT count(*) FROM tickd_partitions WHERE owner = 'r3'" "$DATABASE")
        killed_at=$(date +%s.%N)
        kill -9 "$victim"
        until [ "$(psql_value "SELECT count(*) FROM tickd_partitions WHERE owner = 'r3' OR owner IS NULL" "$DATABASE")" = 0 ]; do
            sleep 0.05
        done
        taken_at=$(date +%s.%N)
        echo "replicas_failover lease_ttl=$LEASE_TTL partitions=$held" \
            "takeover_s=$(awk -v a="$killed_at" -v b="$taken_at" 'BEGIN { printf "%.2f", b - a }')"
    fi
    stop_cluster
done

[ "$REFERENCE" = 1 ] || exit 0
# The reference: one tickd, its own log, same workload.
start_tickd always
line=$("$BIN/tickd-bench" rpc --addr "$TICKD_URL" --connections 6 --secs "$SECS" \
    --mode batch --conc "$CONC" --batch "$BATCH")
echo "single_register sync=always ${line#* }"
line=$("$BIN/tickd-bench" e2e --addr "$TICKD_URL" --connections 6 --rate "$RATE" \
    --secs "$SECS" --delay-ms "$DELAY_MS" --subscribers "$SUBSCRIBERS")
echo "single_e2e sync=always ${line#* }"
stop_tickd
