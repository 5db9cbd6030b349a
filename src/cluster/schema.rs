//! The shared database's schema, created and migrated by tickd itself.
//!
//! Migrations are numbered and applied in order, each in one transaction together with the
//! row that records it in `tickd_schema_migrations`. Replicas starting at the same time
//! race for that row: the loser's transaction fails on the primary key and it simply reads
//! the schema the winner made. No advisory locks, so the same SQL runs on databases that
//! speak PostgreSQL's dialect without its locking functions (CockroachDB, YugabyteDB).

use tokio_postgres::error::SqlState;
use tokio_postgres::Client;
use tracing::info;

use super::error::ClusterError;

/// Each entry is one schema version; never edit a released one, add the next.
const MIGRATIONS: &[&str] = &[
    // 1: timers by partition and deadline, partition leases, live replicas, fired
    // expirations awaiting acknowledgement.
    r"
    CREATE TABLE tickd_cluster (
        singleton BOOL PRIMARY KEY DEFAULT TRUE CHECK (singleton),
        partitions INT NOT NULL
    );
    CREATE TABLE tickd_partitions (
        partition INT PRIMARY KEY,
        owner TEXT,
        epoch BIGINT NOT NULL DEFAULT 0,
        lease_until TIMESTAMPTZ
    );
    CREATE TABLE tickd_replicas (
        replica TEXT PRIMARY KEY,
        alive_until TIMESTAMPTZ NOT NULL
    );
    CREATE SEQUENCE tickd_timer_ids INCREMENT BY 1000 START WITH 1;
    CREATE TABLE tickd_timers (
        id BIGINT PRIMARY KEY,
        namespace TEXT NOT NULL,
        key TEXT,
        partition INT NOT NULL,
        deadline BIGINT NOT NULL,
        payload BYTEA NOT NULL,
        repeat_nanos BIGINT,
        ttl_nanos BIGINT,
        fired_count BIGINT NOT NULL DEFAULT 0
    );
    CREATE UNIQUE INDEX tickd_timers_by_key ON tickd_timers (namespace, key) WHERE key IS NOT NULL;
    CREATE INDEX tickd_timers_by_namespace ON tickd_timers (namespace, id);
    CREATE INDEX tickd_timers_due ON tickd_timers (partition, deadline);
    CREATE TABLE tickd_expirations (
        seq BIGSERIAL PRIMARY KEY,
        namespace TEXT NOT NULL,
        timer_id BIGINT NOT NULL,
        key TEXT,
        payload BYTEA NOT NULL,
        deadline BIGINT NOT NULL,
        fired_at BIGINT NOT NULL,
        repeat_nanos BIGINT,
        ttl_nanos BIGINT,
        fired_count BIGINT NOT NULL,
        late BOOL NOT NULL,
        attempts INT NOT NULL DEFAULT 0,
        claimed_by TEXT,
        claim_until TIMESTAMPTZ
    );
    CREATE INDEX tickd_expirations_by_namespace ON tickd_expirations (namespace, seq);
    CREATE INDEX tickd_expirations_by_claimer ON tickd_expirations (claimed_by) WHERE claimed_by IS NOT NULL;
    ",
    // 2: observers; while a namespace has one, acknowledged expirations stay a little
    // while (for it to copy) instead of being deleted by the ack; claims look only at the
    // unacknowledged ones (observers follow the primary key).
    r"
    CREATE TABLE tickd_observers (
        namespace TEXT NOT NULL,
        observer TEXT NOT NULL,
        alive_until TIMESTAMPTZ NOT NULL,
        PRIMARY KEY (namespace, observer)
    );
    ALTER TABLE tickd_expirations ADD COLUMN acked_at TIMESTAMPTZ;
    CREATE INDEX tickd_expirations_acked ON tickd_expirations (acked_at) WHERE acked_at IS NOT NULL;
    CREATE INDEX tickd_expirations_unacked ON tickd_expirations (namespace, seq) WHERE acked_at IS NULL;
    DROP INDEX tickd_expirations_by_namespace;
    ",
    // 3: a timer's version counts the changes of its deadline, so that a replica's wheel
    // can tell the newer of two loads of one timer whatever order they arrive in.
    r"
    ALTER TABLE tickd_timers ADD COLUMN version BIGINT NOT NULL DEFAULT 0;
    ",
    // 4: cron timers: the schedule beside the next deadline (NULL: none), copied into each
    // expiration so that a delivery shows the schedule that fired it, as on one node.
    r"
    ALTER TABLE tickd_timers ADD COLUMN cron TEXT;
    ALTER TABLE tickd_timers ADD COLUMN time_zone TEXT;
    ALTER TABLE tickd_expirations ADD COLUMN cron TEXT;
    ALTER TABLE tickd_expirations ADD COLUMN time_zone TEXT;
    ",
    // 5: the live namespaces, for `--max-namespaces` (see `cluster::namespaces`): a row
    // per namespace admitted, refreshed by registrations into it, deleted by the trim
    // once the namespace holds nothing. Those live already are admitted here.
    r"
    CREATE TABLE tickd_namespaces (
        namespace TEXT PRIMARY KEY,
        seen_at TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp()
    );
    INSERT INTO tickd_namespaces (namespace)
    SELECT namespace FROM tickd_timers
    UNION SELECT namespace FROM tickd_expirations WHERE acked_at IS NULL;
    ",
    // 6: dead expirations marked as such (see `delivery::DEAD`), so that what delivery
    // walks for every firing and claim (the rows neither acknowledged nor dead) does not
    // grow with the dead list: with 100,000 dead rows in the index of unacknowledged
    // ones, the firing statement's count of buffered expirations took 36-196 ms. The
    // dead rows already there are marked by the next trim, which knows `--max-attempts`.
    r"
    ALTER TABLE tickd_expirations ADD COLUMN dead BOOL NOT NULL DEFAULT false;
    CREATE INDEX tickd_expirations_live ON tickd_expirations (namespace, seq)
        WHERE acked_at IS NULL AND NOT dead;
    CREATE INDEX tickd_expirations_dead ON tickd_expirations (namespace, seq) WHERE dead;
    DROP INDEX tickd_expirations_unacked;
    ",
    // 7: the push sinks set through the API (`tickd.v1.Sinks`), one row per namespace;
    // every replica reads them (see `cluster::sinks`).
    r"
    CREATE TABLE tickd_sinks (
        namespace TEXT PRIMARY KEY,
        url TEXT NOT NULL,
        set_at TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp()
    );
    ",
    // 8: the registering call's W3C trace context (an encoded `tickd.v1.TraceContext`;
    // NULL: none), copied into each of the timer's expirations (see `cluster::trace_column`).
    r"
    ALTER TABLE tickd_timers ADD COLUMN trace_context BYTEA;
    ALTER TABLE tickd_expirations ADD COLUMN trace_context BYTEA;
    ",
];

/// Brings the schema to the latest version, then makes sure the partitions exist. The
/// partition count is fixed by whichever replica created the schema; returns it.
pub async fn migrate(client: &mut Client, partitions: u32) -> Result<u32, ClusterError> {
    ensure_migrations_table(client).await?;
    for (index, migration) in MIGRATIONS.iter().enumerate() {
        let version = index as i32 + 1;
        apply(client, version, migration).await?;
    }
    seed_partitions(client, partitions).await
}

async fn ensure_migrations_table(client: &Client) -> Result<(), ClusterError> {
    let created = client
        .batch_execute(
            "CREATE TABLE IF NOT EXISTS tickd_schema_migrations (
                version INT PRIMARY KEY,
                applied_at TIMESTAMPTZ NOT NULL DEFAULT now()
            )",
        )
        .await;
    match created {
        // Two replicas creating it at once: one of them gets a duplicate-type error.
        Err(error) if is_duplicate(&error) => Ok(()),
        other => other.map_err(ClusterError::query("creating tickd_schema_migrations")),
    }
}

async fn apply(client: &mut Client, version: i32, migration: &str) -> Result<(), ClusterError> {
    let applied = client
        .query_opt(
            "SELECT version FROM tickd_schema_migrations WHERE version = $1",
            &[&version],
        )
        .await
        .map_err(ClusterError::query("reading the schema version"))?;
    if applied.is_some() {
        return Ok(());
    }
    let transaction = client
        .transaction()
        .await
        .map_err(ClusterError::query("starting a migration"))?;
    let recorded = transaction
        .execute(
            "INSERT INTO tickd_schema_migrations (version) VALUES ($1)",
            &[&version],
        )
        .await;
    match recorded {
        // Another replica is applying (or applied) this version.
        Err(error) if is_duplicate(&error) => return Ok(()),
        other => other.map_err(ClusterError::query("recording a migration"))?,
    };
    transaction
        .batch_execute(migration)
        .await
        .map_err(ClusterError::query("applying a migration"))?;
    transaction
        .commit()
        .await
        .map_err(ClusterError::query("committing a migration"))?;
    info!(version, "schema migrated");
    Ok(())
}

async fn seed_partitions(client: &Client, partitions: u32) -> Result<u32, ClusterError> {
    client
        .execute(
            "INSERT INTO tickd_cluster (partitions) VALUES ($1) ON CONFLICT (singleton) DO NOTHING",
            &[&(partitions as i32)],
        )
        .await
        .map_err(ClusterError::query("recording the partition count"))?;
    let row = client
        .query_one("SELECT partitions FROM tickd_cluster", &[])
        .await
        .map_err(ClusterError::query("reading the partition count"))?;
    let partitions: i32 = row.get(0);
    client
        .execute(
            "INSERT INTO tickd_partitions (partition)
             SELECT generate_series(0, $1 - 1) ON CONFLICT (partition) DO NOTHING",
            &[&partitions],
        )
        .await
        .map_err(ClusterError::query("creating the partitions"))?;
    Ok(partitions as u32)
}

fn is_duplicate(error: &tokio_postgres::Error) -> bool {
    matches!(
        error.code(),
        Some(code) if *code == SqlState::UNIQUE_VIOLATION
            || *code == SqlState::DUPLICATE_TABLE
            || *code == SqlState::DUPLICATE_OBJECT
    )
}
