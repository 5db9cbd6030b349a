# Shared helpers for the benchmark scripts (sourced, not run). Everything listens on
# 127.0.0.1 only; every process started here is stopped by `bench_cleanup` (set as the
# EXIT trap by the caller), and the scratch directory removed.

BENCH_PIDS=()
BENCH_WORK=$(mktemp -d "${TMPDIR:-/tmp}/tickd-bench.XXXXXX")
# The binaries benchmarked: this checkout's release build unless BIN names another folder.
BIN=${BIN:-target/release}

# stop_processes PID...: SIGTERM to each, then waits for all of them.
stop_processes() {
    local pid
    for pid in "$@"; do
        kill "$pid" 2>/dev/null || true
    done
    for pid in "$@"; do
        wait "$pid" 2>/dev/null || true
    done
}

bench_cleanup() {
    stop_processes "${BENCH_PIDS[@]}"
    rm -rf "$BENCH_WORK"
}

# A free TCP port on 127.0.0.1.
free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# Waits until something accepts connections on 127.0.0.1:$1 (at most ~20 s).
wait_port() {
    local i
    for i in $(seq 200); do
        if (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; then
            return 0
        fi
        sleep 0.1
    done
    echo "nothing listens on 127.0.0.1:$1" >&2
    return 1
}

# start_tickd SYNC [ARGS...]: starts a fresh tickd (fresh data dir) with --sync SYNC and any
# further ARGS; sets TICKD_URL
# and TICKD_PID. Waits for its "tickd serving" line. TICKD_BIN picks another tickd binary
# (benches/compare_builds.sh runs an earlier build beside this one).
start_tickd() {
    local sync=$1 port log
    shift
    port=$(free_port)
    log="$BENCH_WORK/tickd-$port.log"
    mkdir -p "$BENCH_WORK/tickd-$port"
    "${TICKD_BIN:-$BIN/tickd}" --listen "127.0.0.1:$port" --metrics-listen 127.0.0.1:0 \
        --data-dir "$BENCH_WORK/tickd-$port" --sync "$sync" "$@" >"$log" 2>&1 &
    TICKD_PID=$!
    BENCH_PIDS+=("$TICKD_PID")
    local i
    for i in $(seq 200); do
        if grep -qs "tickd serving" "$log"; then
            TICKD_URL="http://127.0.0.1:$port"
            return 0
        fi
        if ! kill -0 "$TICKD_PID" 2>/dev/null; then
            break
        fi
        sleep 0.1
    done
    echo "tickd did not start:" >&2
    cat "$log" >&2
    return 1
}

stop_tickd() {
    kill "$TICKD_PID" 2>/dev/null || true
    wait "$TICKD_PID" 2>/dev/null || true
}

# The value of KEY in a `name key=value ...` line.
field() {
    local line=$1 key=$2
    sed -n "s/.* $key=\([^ ]*\).*/\1/p" <<<"$line"
}

# ratio A B: A / B with one decimal, or "nan".
ratio() {
    awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.1f", a / b; else print "nan" }'
}

# The machine's 1-minute load average, to print next to results (the box is shared).
load1() {
    cut -d' ' -f1 /proc/loadavg
}

# start_postgres: a fresh PostgreSQL cluster on a free port of 127.0.0.1, durable settings
# (fsync and synchronous_commit on, as in production), plus the server options in
# PG_OPTIONS if set; sets PG_PORT. Debian's packages;
# run as the `postgres` user when we are root (postgres refuses to run as root).
start_postgres() {
    local bin dir as_postgres=()
    bin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)
    if [ -z "$bin" ]; then
        echo "PostgreSQL is missing: tests/tools/install-packages postgresql" >&2
        return 1
    fi
    dir="$BENCH_WORK/postgres"
    mkdir -p "$dir"
    if [ "$(id -u)" = 0 ]; then
        chown postgres "$dir"
        chmod 755 "$BENCH_WORK"
        as_postgres=(runuser -u postgres --)
    fi
    "${as_postgres[@]}" "$bin/initdb" -A trust -U postgres -D "$dir/data" >"$dir/initdb.log" 2>&1
    PG_PORT=$(free_port)
    "${as_postgres[@]}" "$bin/postgres" -D "$dir/data" -h 127.0.0.1 -p "$PG_PORT" -k "$dir" \
        -c max_connections=300 -c shared_buffers=1GB ${PG_OPTIONS:-} >"$dir/postgres.log" 2>&1 &
    BENCH_PIDS+=("$!")
    local i
    for i in $(seq 200); do
        if psql -h 127.0.0.1 -p "$PG_PORT" -U postgres -c 'SELECT 1' >/dev/null 2>&1; then
            return 0
        fi
        sleep 0.1
    done
    echo "PostgreSQL did not start:" >&2
    cat "$dir/postgres.log" >&2
    return 1
}

# psql_value SQL [DATABASE]: one value from the benchmark's PostgreSQL.
psql_value() {
    psql -h 127.0.0.1 -p "$PG_PORT" -U postgres -d "${2:-postgres}" -tAc "$1"
}

# start_replica DATABASE ID [extra tickd args...]: one tickd replica on DATABASE; appends
# its URL to REPLICA_URLS and its pid to REPLICA_PIDS.
start_replica() {
    local database=$1 id=$2 port log
    shift 2
    port=$(free_port)
    log="$BENCH_WORK/replica-$id-$port.log"
    "${TICKD_BIN:-$BIN/tickd}" --listen "127.0.0.1:$port" --metrics-listen 127.0.0.1:0 \
        --store "postgres://postgres@127.0.0.1:$PG_PORT/$database" --replica-id "$id" "$@" \
        >"$log" 2>&1 &
    local pid=$!
    BENCH_PIDS+=("$pid")
    local i
    for i in $(seq 300); do
        if grep -qs "tickd serving" "$log"; then
            REPLICA_URLS+=("http://127.0.0.1:$port")
            REPLICA_PIDS+=("$pid")
            return 0
        fi
        sleep 0.1
    done
    echo "replica $id did not start:" >&2
    cat "$log" >&2
    return 1
}
