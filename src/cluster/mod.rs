//! Replicated tickd: several replicas share one PostgreSQL database (`--store postgres://`).
//!
//! The database is the store and the coordination point; no replica talks to another.
//! A timer's life here:
//! - **born** in [`timers`]: a row in `tickd_timers`, in partition `id % partitions`,
//!   committed before the RPC is answered; if it is due within the load horizon, a
//!   `NOTIFY tickd_due` in the same statement tells its partition's owner at once;
//! - **waits** in the owner's [`schedule`] (a wheel on the worker thread), loaded by
//!   [`loader`] from that notification or from its periodic scan of the horizon;
//! - **fires** in [`firing`]: one transaction checks that this replica still holds the
//!   partition's lease at the epoch it was granted (the fence), deletes or re-arms the row,
//!   and records an expiration in `tickd_expirations`;
//! - **is delivered** by [`delivery`] on whichever replica its subscribers are connected
//!   to: claimed from the database for one subscriber until its ack deadline, deleted when
//!   acknowledged, claimed again (next attempt) when the deadline passes.
//!
//! [`ownership`] renews this replica's partition leases, takes over expired ones, and
//! balances partitions across the live replicas. Every connection to the database is opened
//! from one [`Database`] ([`database`]), with the TLS settings of [`tls`].

pub mod database;
pub mod delivery;
pub mod firing;
pub mod loader;
pub mod ownership;
pub mod schedule;
pub mod schema;
pub mod timers;
pub mod tls;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use rustc_hash::FxHashMap;
use tokio::sync::{mpsc, watch};
use tracing::{info, warn};

use crate::config::Config;
use crate::delivery::DeliveryConfig;
use crate::metrics::Metrics;
use crate::worker::clock::SystemClock;
use crate::worker::{Worker, WorkerHandle};
pub use database::{Connections, Database, StoreUrl};
use schedule::{Schedule, ScheduleCommand};

#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    #[error("connecting to the store database {database}: {}", with_causes(.source))]
    Connect {
        /// [`Database`]'s description: where, as whom, in which sslmode; no password.
        database: String,
        #[source]
        source: tokio_postgres::Error,
    },
    #[error("{context}: {source}")]
    Query {
        context: &'static str,
        #[source]
        source: tokio_postgres::Error,
    },
    #[error("starting the timer worker thread: {0}")]
    Worker(#[source] std::io::Error),
    #[error("{0} is not supported with --store postgres")]
    Unsupported(&'static str),
    #[error("{0}")]
    InvalidConfig(String),
    #[error("settling auto-acknowledged deliveries: {0}")]
    Settle(String),
}

/// `error` and its causes, `: `-separated. tokio-postgres' own text names only the kind of
/// failure ("db error", "error performing TLS handshake"); the reason an operator needs
/// (the server's message, the certificate problem) is in its causes.
pub(crate) fn with_causes(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut cause = error.source();
    while let Some(next) = cause {
        text.push_str(": ");
        text.push_str(&next.to_string());
        cause = next.source();
    }
    text
}

/// The API sees a database failure as UNAVAILABLE: the call may be retried.
impl From<ClusterError> for crate::domain::TimerError {
    fn from(error: ClusterError) -> Self {
        Self::Unavailable(format!("the store database failed: {error}"))
    }
}

impl ClusterError {
    /// For `map_err`: names what was being done when the database refused.
    fn query(context: &'static str) -> impl FnOnce(tokio_postgres::Error) -> ClusterError {
        move |source| ClusterError::Query { context, source }
    }
}

/// What the replicated mode reads from the configuration.
#[derive(Debug, Clone)]
pub struct ClusterConfig {
    pub database: Database,
    pub replica_id: String,
    /// Used only if this replica creates the schema.
    pub partitions: u32,
    pub lease_ttl: Duration,
    pub load_horizon: Duration,
    pub connections: u32,
    pub tick: Duration,
    pub max_pending: usize,
    pub worker_queue: usize,
    pub delivery: DeliveryConfig,
}

impl ClusterConfig {
    pub fn from_config(config: &Config, url: &str) -> Result<Self, ClusterError> {
        if config.max_pending_per_namespace > 0 {
            return Err(ClusterError::Unsupported("--max-pending-per-namespace"));
        }
        if config.lease_ttl < Duration::from_secs(1) || config.load_horizon < Duration::from_secs(1)
        {
            return Err(ClusterError::InvalidConfig(format!(
                "--lease-ttl ({:?}) and --load-horizon ({:?}) must be at least 1s",
                config.lease_ttl, config.load_horizon
            )));
        }
        let replica_id = config.replica_id.clone().unwrap_or_else(default_replica_id);
        Ok(Self {
            database: Database::new(url, config.store_ca_file.as_deref())?,
            replica_id,
            partitions: config.partitions,
            lease_ttl: config.lease_ttl,
            load_horizon: config.load_horizon,
            connections: config.store_connections,
            tick: config.tick,
            max_pending: config.max_pending,
            worker_queue: config.worker_queue,
            delivery: config.delivery(),
        })
    }
}

/// Host name and process id: unique among live replicas, and readable in the lease table.
fn default_replica_id() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|name| name.trim().to_owned())
        .unwrap_or_else(|_| "tickd".to_owned());
    format!("{host}-{}", std::process::id())
}

/// Resolves once `stopping` turns true (or its sender is gone).
async fn until_stopped(stopping: &mut watch::Receiver<bool>) {
    let _ = stopping.wait_for(|stopping| *stopping).await;
}

/// The partitions this replica holds, each with the epoch its lease was granted at.
/// Written by [`ownership`], read by everything that must not act on a partition it lost.
#[derive(Clone, Default)]
pub struct Owned {
    epochs: Arc<Mutex<FxHashMap<u32, i64>>>,
}

impl Owned {
    pub fn epoch(&self, partition: u32) -> Option<i64> {
        self.lock().get(&partition).copied()
    }

    /// Those of `partitions` held, each with its epoch (one lock for all of them).
    pub fn tenures(&self, partitions: impl IntoIterator<Item = u32>) -> Vec<(u32, i64)> {
        let epochs = self.lock();
        partitions
            .into_iter()
            .filter_map(|partition| Some((partition, *epochs.get(&partition)?)))
            .collect()
    }

    /// [`Owned::tenures`] as the two SQL arrays (`INT4[]`, `INT8[]`) the fencing
    /// statements join on.
    pub fn tenure_arrays(&self, partitions: impl IntoIterator<Item = u32>) -> (Vec<i32>, Vec<i64>) {
        self.tenures(partitions)
            .into_iter()
            .map(|(partition, epoch)| (partition as i32, epoch))
            .unzip()
    }

    pub fn partitions(&self) -> Vec<u32> {
        let mut partitions: Vec<u32> = self.lock().keys().copied().collect();
        partitions.sort_unstable();
        partitions
    }

    pub fn len(&self) -> usize {
        self.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Records a lease the database granted (the lease loop's job; tests use it too).
    pub fn insert(&self, partition: u32, epoch: i64) {
        self.lock().insert(partition, epoch);
    }

    fn remove(&self, partitions: &[u32]) {
        let mut epochs = self.lock();
        for partition in partitions {
            epochs.remove(partition);
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, FxHashMap<u32, i64>> {
        self.epochs
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// What every part of a replica needs to know about the cluster.
#[derive(Clone)]
pub struct Shared {
    pub replica_id: Arc<str>,
    pub partitions: u32,
    pub lease_ttl: Duration,
    pub load_horizon: Duration,
    pub owned: Owned,
    pub schedule: WorkerHandle<ScheduleCommand>,
    pub clock: SystemClock,
}

impl Shared {
    pub fn partition_of(&self, id: u64) -> u32 {
        (id % u64::from(self.partitions)) as u32
    }

    /// Unix nanoseconds now, on this replica's clock (deadlines are kept in it).
    pub fn unix_now(&self) -> u64 {
        use crate::worker::clock::Clock;
        self.clock.now().unix
    }

    /// A timer of a partition this replica holds, ready for its wheel (with the epoch it
    /// holds the partition at); `None` if it holds it no longer.
    pub fn due_timer(&self, row: DueRow<'_>, late: bool) -> Option<schedule::DueTimer> {
        Some(schedule::DueTimer {
            namespace: Arc::from(row.namespace),
            id: row.id,
            partition: row.partition,
            deadline_unix: row.deadline_unix,
            late,
            epoch: self.owned.epoch(row.partition)?,
            version: row.version,
        })
    }

    /// [`Shared::due_timer`] from a row whose first columns are `namespace, id, partition,
    /// deadline, version`; `None` also when the deadline is NULL (a fired one-shot timer).
    pub fn due_timer_of_row(
        &self,
        row: &tokio_postgres::Row,
        late: bool,
    ) -> Option<schedule::DueTimer> {
        let due = DueRow {
            namespace: row.get(0),
            id: row.get::<_, i64>(1) as u64,
            partition: row.get::<_, i32>(2) as u32,
            deadline_unix: row.get::<_, Option<i64>>(3)? as u64,
            version: row.get(4),
        };
        self.due_timer(due, late)
    }

    /// The end of the load horizon: timers due by then belong in the owner's wheel.
    pub fn horizon_end(&self) -> u64 {
        self.unix_now()
            .saturating_add(self.load_horizon.as_nanos() as u64)
    }
}

/// What the wheel needs of a timer's row (or of its `tickd_due` announcement).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DueRow<'a> {
    pub namespace: &'a str,
    pub id: u64,
    pub partition: u32,
    pub deadline_unix: u64,
    pub version: i64,
}

/// A running replica: the handles the API uses, and what [`Replica::stop`] winds down.
pub struct Replica {
    pub timers: timers::ClusterTimers,
    pub deliveries: delivery::ClusterDeliveries,
    worker: Worker<Schedule>,
    ownership: ownership::Ownership,
    stop: watch::Sender<bool>,
    end_subscriptions: watch::Sender<bool>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
    /// A third of the lease ttl: how often leases are renewed.
    lease_renewal: std::time::Duration,
}

impl Replica {
    /// Connects, migrates the schema, joins the cluster and starts taking partitions.
    pub async fn start(config: ClusterConfig, metrics: Arc<Metrics>) -> Result<Self, ClusterError> {
        let database = &config.database;
        let mut setup = database.connect().await?;
        let partitions = schema::migrate(&mut setup, config.partitions).await?;
        let encrypted = Database::encrypted(&setup).await;
        drop(setup);
        if encrypted == Some(false) && database.ssl_mode() == tls::SslMode::Prefer {
            warn!(store = %database, "store connection not encrypted: the database offers no tls");
        }
        let clock = SystemClock::new();
        let (fired_sender, fired) = mpsc::unbounded_channel();
        let schedule = Schedule::new(config.tick.as_nanos().max(1) as u64);
        let worker_config = crate::worker::WorkerConfig {
            queue_capacity: config.worker_queue,
            busy_seconds: Some(metrics.worker_busy_seconds.clone()),
            ..Default::default()
        };
        let worker = Worker::spawn(schedule, clock, worker_config, move |batch| {
            let _ = fired_sender.send(batch);
        })
        .map_err(ClusterError::Worker)?;
        let shared = Shared {
            replica_id: Arc::from(config.replica_id.as_str()),
            partitions,
            lease_ttl: config.lease_ttl,
            load_horizon: config.load_horizon,
            owned: Owned::default(),
            schedule: worker.handle(),
            clock,
        };
        let (stop, stopping) = watch::channel(false);
        let (end_subscriptions, subscriptions_ending) = watch::channel(false);
        let connections = Connections::open(database, config.connections).await?;
        // Claims and acks on connections of their own: never queued behind registrations.
        let delivery_connections = Connections::open(database, 2).await?;
        let wakeups = delivery::Wakeups::default();
        let (acquired_sender, acquired) = mpsc::unbounded_channel();
        let ownership = ownership::Ownership::new(
            Connections::open(database, 1).await?,
            shared.clone(),
            acquired_sender,
            metrics.partitions_owned.clone(),
        );
        let mut tasks = Vec::new();
        tasks.push(tokio::spawn(ownership.clone().run(stopping.clone())));
        let loader = loader::Loader::connect(database, shared.clone(), wakeups.clone()).await?;
        tasks.push(tokio::spawn(loader.run(acquired, stopping.clone())));
        let firing = firing::Firing::new(
            Connections::open(database, 1).await?,
            shared.clone(),
            metrics.clone(),
        );
        tasks.push(tokio::spawn(firing.run(fired, stopping.clone())));
        let deliveries = delivery::ClusterDeliveries::new(
            delivery_connections,
            metrics.clone(),
            shared.clone(),
            config.delivery,
            wakeups,
            subscriptions_ending,
        );
        tasks.push(tokio::spawn(deliveries.clone().trim_dead(stopping)));
        info!(
            replica = %config.replica_id,
            partitions,
            store = %database,
            store_tls = %encrypted.map_or("unknown", |on| if on { "on" } else { "off" }),
            "replica joined the cluster"
        );
        Ok(Self {
            timers: timers::ClusterTimers::new(connections, shared, metrics),
            deliveries,
            worker,
            ownership,
            stop,
            end_subscriptions,
            tasks,
            lease_renewal: config.lease_ttl / 3,
        })
    }

    /// How long this replica has been unable to renew its leases, once that is longer
    /// than one renewal period: its database is unreachable (or too slow), and it should
    /// not be sent calls until it is back.
    pub fn database_unreachable_for(&self) -> Option<std::time::Duration> {
        self.ownership.rounds().unreachable_for(self.lease_renewal)
    }

    /// False if the replica's wheel thread or one of its tasks (leases, loader, firing,
    /// the dead trim) is gone: they end only when stopped, so otherwise by a panic.
    pub fn is_running(&self) -> bool {
        self.worker.is_running() && self.tasks.iter().all(|task| !task.is_finished())
    }

    /// Ends every subscription stream (graceful shutdown begins). Their unacknowledged
    /// deliveries stay claimed until their ack deadline, so that acks of deliveries the
    /// clients already hold still succeed during the drain; after it any subscriber, on
    /// any replica, takes them.
    pub fn end_subscriptions(&self) {
        let _ = self.end_subscriptions.send(true);
    }

    /// Ends subscriptions and background work, then hands every partition back so that
    /// the other replicas take them over at once rather than after the lease runs out.
    pub async fn stop(self) -> usize {
        self.end_subscriptions();
        let _ = self.stop.send(true);
        // A wheel thread that panicked held only a cache of the database: nothing is lost.
        let schedule = tokio::task::block_in_place(|| self.worker.try_stop());
        for task in self.tasks {
            let _ = task.await;
        }
        self.ownership.leave().await;
        schedule.map_or(0, |schedule| schedule.len())
    }
}
