//! A replica's life: what it reads from the configuration, how it starts (schema, wheel
//! thread, connections, the tasks of [`super::ownership`], [`super::loader`],
//! [`super::firing`] and the dead trim) and how it stops, handing its partitions back.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, watch};
use tracing::{info, info_span, warn, Instrument, Span};

use super::answers::Answers;
use super::connections::Connections;
use super::database::Database;
use super::delivery::ClusterDeliveries;
use super::error::ClusterError;
use super::namespaces::NamespaceCap;
use super::notifications::Wakeups;
use super::schedule::Schedule;
use super::shared::{Owned, Shared};
use super::sinks::ClusterSinks;
use super::timers::ClusterTimers;
use super::{firing, loader, ownership, schema, tls};
use crate::budget::MemoryBudget;
use crate::clock::SystemClock;
use crate::domain::{Backend, DeliveryConfig, Expirations, Health, SinkStore, Stopping, Timers};
use crate::metrics::Metrics;
use crate::worker::Worker;

/// What the replicated mode reads from the configuration.
#[derive(Debug, Clone)]
pub struct ClusterConfig {
    pub(crate) database: Database,
    pub(crate) replica_id: String,
    /// Used only if this replica creates the schema.
    pub(crate) partitions: u32,
    pub(crate) lease_ttl: Duration,
    pub(crate) load_horizon: Duration,
    pub(crate) connections: u32,
    pub(crate) tick: Duration,
    pub(crate) worker_queue: usize,
    pub(crate) delivery: DeliveryConfig,
    /// `--max-namespaces` (0: no limit).
    pub(crate) max_namespaces: usize,
    /// What the replica holds in memory is charged to it: its wheel's timers, the
    /// registrations under way and the deliveries waiting in streams (see `schedule`,
    /// `timers::register` and `delivery::charged`).
    pub(crate) memory: Arc<MemoryBudget>,
}

/// Host name and process id: unique among live replicas, and readable in the lease table.
pub(crate) fn default_replica_id() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|name| name.trim().to_owned())
        .unwrap_or_else(|_| "tickd".to_owned());
    format!("{host}-{}", std::process::id())
}

/// A running replica: the handles the API uses, and what [`Replica::stop`] winds down.
pub struct Replica {
    pub(crate) timers: ClusterTimers,
    pub(crate) deliveries: ClusterDeliveries,
    sinks: ClusterSinks,
    worker: Worker<Schedule>,
    ownership: ownership::Ownership,
    stop: watch::Sender<bool>,
    end_subscriptions: watch::Sender<bool>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
    /// A third of the lease ttl: how often leases are renewed.
    lease_renewal: std::time::Duration,
    /// When the database last answered any of this replica's connections.
    answers: Answers,
    /// Carries the replica's id into every log event of its tasks.
    span: Span,
}

impl Replica {
    /// Connects, migrates the schema, joins the cluster and starts taking partitions.
    pub(crate) async fn start(
        config: ClusterConfig,
        metrics: Arc<Metrics>,
    ) -> Result<Self, ClusterError> {
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
        let schedule =
            Schedule::new(config.tick.as_nanos().max(1) as u64).with_memory(config.memory.clone());
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
        let wakeups = Wakeups::default();
        let (acquired_sender, acquired) = mpsc::unbounded_channel();
        let ownership = ownership::Ownership::new(
            Connections::open(database, 1).await?,
            shared.clone(),
            acquired_sender,
            metrics.partitions_owned.clone(),
        );
        let mut tasks = Vec::new();
        // Every task's log events carry the replica's id through this span.
        let span = info_span!("replica", replica = %config.replica_id);
        tasks.push(spawn_in(&span, ownership.clone().run(stopping.clone())));
        let loader = loader::Loader::connect(database, shared.clone(), wakeups.clone()).await?;
        tasks.push(spawn_in(&span, loader.run(acquired, stopping.clone())));
        let deliveries = ClusterDeliveries::new(
            delivery_connections,
            metrics.clone(),
            shared.clone(),
            config.delivery,
            wakeups,
            subscriptions_ending,
        )
        .in_span(span.clone())
        .with_memory(config.memory.clone())
        .with_ack_connections(Connections::open(&database.with_probe_plans(), 1).await?);
        // The firing connections end a statement at the bound the fence relies on.
        let bound = firing::statement_bound(config.lease_ttl);
        let firing = firing::Firing::new(
            Connections::open(&database.with_statement_timeout(bound), 1).await?,
            shared.clone(),
            metrics.clone(),
        )
        .with_generic_plans(
            Connections::open(
                &database.with_generic_plans().with_statement_timeout(bound),
                1,
            )
            .await?,
        )
        .with_delivery(&config.delivery)
        .with_direct_delivery(deliveries.direct_delivery());
        tasks.push(spawn_in(&span, firing.run(fired, stopping.clone())));
        tasks.push(spawn_in(&span, deliveries.clone().trim_dead(stopping)));
        let namespaces =
            NamespaceCap::new(config.max_namespaces, Connections::open(database, 1).await?);
        let sinks = ClusterSinks::new(Connections::open(database, 1).await?);
        info!(
            parent: &span,
            partitions,
            store = %database,
            store_tls = %encrypted.map_or("unknown", |on| if on { "on" } else { "off" }),
            "replica joined the cluster"
        );
        Ok(Self {
            timers: ClusterTimers::new(connections, shared, metrics, namespaces, config.memory),
            deliveries,
            sinks,
            worker,
            ownership,
            stop,
            end_subscriptions,
            tasks,
            lease_renewal: config.lease_ttl / 3,
            answers: database.answers().clone(),
            span,
        })
    }

    /// How long the database has answered none of this replica's statements, once that
    /// is longer than two lease renewal periods: it is unreachable (down, cut off,
    /// frozen), and the replica should not be sent calls until it answers again.
    ///
    /// Any answer counts, on any connection (see `connections::Answers`): readiness is
    /// about serving registrations and deliveries, which a database that answers does,
    /// even while one statement (a lease round, a large firing) waits. The lease round
    /// runs every renewal period, so a reachable database is never silent that long.
    pub(crate) fn database_unreachable_for(&self) -> Option<std::time::Duration> {
        let silent = self.answers.silent_for();
        (silent > self.lease_renewal * 2).then_some(silent)
    }

    /// False if the replica's wheel thread or one of its tasks (leases, loader, firing,
    /// the dead trim) is gone: they end only when stopped, so otherwise by a panic.
    pub(crate) fn is_running(&self) -> bool {
        self.worker.is_running() && self.tasks.iter().all(|task| !task.is_finished())
    }

    /// Ends every subscription stream (graceful shutdown begins). Their unacknowledged
    /// deliveries stay claimed until their ack deadline, so that acks of deliveries the
    /// clients already hold still succeed during the drain; after it any subscriber, on
    /// any replica, takes them.
    pub(crate) fn end_subscriptions(&self) {
        let _ = self.end_subscriptions.send(true);
    }

    /// Ends subscriptions and background work, then hands every partition back so that
    /// the other replicas take them over at once rather than after the lease runs out.
    pub(crate) async fn stop(self) -> usize {
        self.end_subscriptions();
        let _ = self.stop.send(true);
        // A wheel thread that panicked held only a cache of the database: nothing is lost.
        let schedule = tokio::task::block_in_place(|| self.worker.try_stop());
        for task in self.tasks {
            let _ = task.await;
        }
        self.ownership.leave().instrument(self.span).await;
        schedule.map_or(0, |schedule| schedule.len())
    }
}

/// The replicated backend, as the server holds it.
impl Backend for Replica {
    fn timers(&self) -> Arc<dyn Timers> {
        Arc::new(self.timers.clone())
    }

    fn expirations(&self) -> Arc<dyn Expirations> {
        Arc::new(self.deliveries.clone())
    }

    fn sinks(&self) -> Arc<dyn SinkStore> {
        Arc::new(self.sinks.clone())
    }

    fn health(&self) -> Health {
        if !self.is_running() {
            return Health::Failed("the replica's wheel thread stopped");
        }
        match self.database_unreachable_for() {
            Some(unreachable) => Health::Unreachable(unreachable),
            None => Health::Serving,
        }
    }

    fn shutdown(&self) {
        self.end_subscriptions();
    }

    fn stop(self: Box<Self>) -> Stopping {
        Box::pin(async move { Ok(Replica::stop(*self).await) })
    }
}

/// Spawns one of the replica's tasks inside its span.
fn spawn_in(
    span: &Span,
    task: impl std::future::Future<Output = ()> + Send + 'static,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(task.instrument(span.clone()))
}
