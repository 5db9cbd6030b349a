//! The parts of one replica without its background tasks (a migrated database, its shared
//! state, a real wheel worker), for tests that drive one part directly: the firing fence,
//! the trim of expirations.

use std::time::Duration;

use crate::common::postgres::Postgres;

/// A migrated database and the shared state of one replica (`stale`, owning nothing, over
/// 4 partitions), with a real wheel worker; stop the worker at the end of the test.
pub(crate) async fn replica_parts(
    postgres: &Postgres,
) -> (
    tickd::cluster::Shared,
    tickd::worker::Worker<tickd::cluster::schedule::Schedule>,
) {
    let mut setup = postgres.connect().await;
    tickd::cluster::schema::migrate(&mut setup, 4)
        .await
        .expect("migrating the schema");
    let worker = tickd::worker::Worker::spawn(
        tickd::cluster::schedule::Schedule::new(1_000_000),
        tickd::clock::SystemClock::new(),
        tickd::worker::WorkerConfig::default(),
        |_| {},
    )
    .expect("starting a wheel worker");
    let shared = tickd::cluster::Shared {
        replica_id: "stale".into(),
        partitions: 4,
        lease_ttl: Duration::from_secs(2),
        load_horizon: Duration::from_secs(5),
        owned: tickd::cluster::Owned::default(),
        schedule: worker.handle(),
        clock: tickd::clock::SystemClock::new(),
    };
    (shared, worker)
}

/// A connection set of one connection to `postgres`, as a replica's parts use.
pub(crate) async fn connections(postgres: &Postgres) -> tickd::cluster::Connections {
    tickd::cluster::Connections::open(&postgres.database(), 1)
        .await
        .expect("connecting")
}

/// A connection set as a replica runs the firing statement on (`Database::with_generic_plans`:
/// one plan per statement, prepared again every quarter second).
pub(crate) async fn generic_plan_connections(postgres: &Postgres) -> tickd::cluster::Connections {
    tickd::cluster::Connections::open(&postgres.database().with_generic_plans(), 1)
        .await
        .expect("connecting")
}
