//! [`ClusterDeliveries`]: the replicated backend's side of the API's [`Expirations`],
//! and what its subscriber, observer and trim tasks share (the connections, the delivery
//! settings, this replica's subscribers and its memory budget). Subscribing is in
//! `subscriber` and `observer`, acks in `acks`, the dead list and Redrive in `dead`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use super::acks;
use super::direct::DirectDelivery;
use super::rows::split_delivery_id;
use super::slot::LocalSubscribers;
use crate::budget::MemoryBudget;
use crate::cluster::connections::Connections;
use crate::cluster::error::ClusterError;
use crate::cluster::notifications::{Wakeups, FIRED_CHANNEL};
use crate::cluster::shared::Shared;
use crate::domain::DeliveryConfig;
use crate::domain::{
    AckOutcome, Answer, DeadList, DeliveryStream, Expirations, GiveBack, Hold, RedriveOutcome,
    SubscribeOptions, TimerError,
};
use crate::metrics::Metrics;

#[derive(Clone)]
pub struct ClusterDeliveries {
    pub(super) connections: Connections,
    pub(super) metrics: Arc<Metrics>,
    pub(super) shared: Shared,
    pub(super) config: DeliveryConfig,
    pub(super) wakeups: Wakeups,
    pub(super) stopping: watch::Receiver<bool>,
    pub(super) next_subscriber: Arc<AtomicU64>,
    /// The replica's span, for the subscriber and observer tasks' log events.
    pub(super) span: tracing::Span,
    /// Tells this process's subscribers from those of an earlier one with the same
    /// replica id, whose claims are not theirs.
    pub(super) incarnation: u64,
    /// The replica's memory budget, charged for deliveries waiting in streams.
    pub(super) memory: Arc<MemoryBudget>,
    /// Acks of every caller on this replica, settled a batch per statement.
    pub(super) acks: acks::Acks,
    /// This replica's subscribers, for the firing to deliver to directly.
    pub(super) local: LocalSubscribers,
    /// Subscriber streams dropped whose claims are still being handed back (see
    /// `charged::StreamEnd`): what [`Expirations::recorded`] waits for.
    pub(super) handing_back: Arc<watch::Sender<usize>>,
}

impl ClusterDeliveries {
    pub fn new(
        connections: Connections,
        metrics: Arc<Metrics>,
        shared: Shared,
        config: DeliveryConfig,
        wakeups: Wakeups,
        stopping: watch::Receiver<bool>,
    ) -> Self {
        Self {
            acks: acks::start(connections.clone()),
            local: LocalSubscribers::default(),
            handing_back: Arc::new(watch::Sender::new(0)),
            connections,
            metrics,
            shared,
            config,
            wakeups,
            stopping,
            next_subscriber: Arc::new(AtomicU64::new(1)),
            span: tracing::Span::none(),
            incarnation: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |since| since.as_nanos() as u64),
            memory: MemoryBudget::unlimited(),
        }
    }

    /// Settles acks on `connections`, opened from `Database::with_probe_plans`: the ack
    /// statement is then planned a few times a second instead of at every batch, where its
    /// planning took 70% of its database time (0.34 ms against 0.10-0.14 ms of execution
    /// a call, three replicas at 5,000 timers/s). `acks::ACK` says why its plan holds at
    /// any batch size. Claims keep fresh plans on the connections given to `new`.
    pub(crate) fn with_ack_connections(mut self, connections: Connections) -> Self {
        self.acks = acks::start(connections);
        self
    }

    /// Charges deliveries waiting in streams to `memory` (by default a budget of their
    /// own, unlimited).
    pub(crate) fn with_memory(mut self, memory: Arc<MemoryBudget>) -> Self {
        self.memory = memory;
        self
    }

    /// What the firing needs to hand expirations to this replica's subscribers directly.
    pub(crate) fn direct_delivery(&self) -> DirectDelivery {
        DirectDelivery {
            subscribers: self.local.clone(),
            memory: self.memory.clone(),
            metrics: self.metrics.clone(),
            wakeups: self.wakeups.clone(),
            connections: self.connections.clone(),
        }
    }

    /// Runs the subscriber and observer tasks in `span` (the replica's).
    pub(crate) fn in_span(mut self, span: tracing::Span) -> Self {
        self.span = span;
        self
    }

    /// `replica/incarnation/number`: what a subscriber's claims (or an observer's
    /// registration) are stamped with, unique across replicas and restarts.
    pub(super) fn next_name(&self) -> String {
        let number = self.next_subscriber.fetch_add(1, Ordering::Relaxed);
        format!("{}/{}/{number}", self.shared.replica_id, self.incarnation)
    }

    pub(crate) fn subscribe(
        &self,
        options: SubscribeOptions,
    ) -> Result<DeliveryStream, TimerError> {
        if options.observer {
            return Ok(self.observe(options.namespace));
        }
        let rules = options.rules(&self.config.subscriber);
        Ok(self.claim_for(options, rules))
    }

    pub(crate) async fn ack(
        &self,
        namespace: String,
        delivery_ids: Vec<u64>,
    ) -> Result<AckOutcome, TimerError> {
        let request = acks::AckRequest {
            namespace: namespace.clone(),
            delivery_ids,
        };
        let given = request.delivery_ids.clone();
        let settled = self
            .acks
            .submit(request)
            .await
            .ok_or_else(|| TimerError::Unavailable("the replica is stopping".into()))??;
        let settled_ids: Vec<u64> = settled.iter().copied().collect();
        // Room for this replica's subscribers of the namespace that were out of it.
        if self.local.acknowledged(&namespace, &settled_ids) {
            self.wakeups.wake(&namespace);
        }
        let unknown = given
            .into_iter()
            .filter(|id| !settled.contains(id))
            .collect();
        Ok(AckOutcome {
            acknowledged: settled.len() as u32,
            unknown,
        })
    }
}

impl ClusterDeliveries {
    /// Moves the claim of one live attempt to end `after` from now, whichever replica
    /// delivered it: it is then claimed again (its attempt counted) as any claim whose
    /// deadline passed. Kept, the window of the subscriber here that holds it counts it
    /// until then too (a later deadline only, never an earlier one); released, the claim
    /// is no subscriber's meanwhile, so it leaves that window at once (and its subscriber
    /// is woken to fill the place).
    pub(crate) async fn retry_later(
        &self,
        namespace: String,
        delivery_id: u64,
        after: Duration,
        hold: Hold,
    ) -> Result<bool, TimerError> {
        let (seq, attempts) = split_delivery_id(delivery_id);
        let after_micros = i64::try_from(after.as_micros()).unwrap_or(i64::MAX);
        let statement = match hold {
            Hold::Kept => RETRY_LATER_KEPT,
            Hold::Released => RETRY_LATER_RELEASED,
        };
        let moved = self
            .connections
            .client()
            .await?
            .execute(statement, &[&namespace, &seq, &attempts, &after_micros])
            .await
            .map_err(ClusterError::query("moving a claim's deadline"))?;
        if moved == 1 {
            match hold {
                Hold::Kept => {
                    // Stamped after the database's clock moved it: never earlier than its claim.
                    let until = std::time::Instant::now() + after;
                    self.local.extended(&namespace, delivery_id, until);
                }
                Hold::Released => {
                    if self.local.acknowledged(&namespace, &[delivery_id]) {
                        self.wakeups.wake(&namespace);
                    }
                }
            }
        }
        Ok(moved == 1)
    }
}

impl ClusterDeliveries {
    /// Ends the claim of one live attempt that never reached its client, whichever
    /// replica delivered it, with its attempt refunded: it is claimed next as the attempt
    /// it was, once `when` lets it. Its place in the window of the subscriber here that
    /// held it is freed, and the namespace's subscribers on every replica are woken to
    /// claim it (or to look again when it may be claimed).
    pub(crate) async fn give_back(
        &self,
        namespace: String,
        delivery_id: u64,
        when: GiveBack,
    ) -> Result<bool, TimerError> {
        let (seq, attempts) = split_delivery_id(delivery_id);
        let after = match when {
            GiveBack::Leaving => Duration::ZERO,
            GiveBack::After(after) => after,
        };
        let after_micros = i64::try_from(after.as_micros()).unwrap_or(i64::MAX);
        let released = self
            .connections
            .client()
            .await?
            .query(
                GIVE_BACK,
                &[&namespace, &seq, &attempts, &FIRED_CHANNEL, &after_micros],
            )
            .await
            .map_err(ClusterError::query("giving a delivery back"))?;
        if released.is_empty() {
            return Ok(false);
        }
        self.local.acknowledged(&namespace, &[delivery_id]);
        Ok(true)
    }
}

impl ClusterDeliveries {
    /// How many expirations of each namespace wait to be claimed now, on any replica.
    pub(crate) async fn waiting(&self, namespaces: Vec<String>) -> Result<Vec<u64>, TimerError> {
        let counted = self
            .connections
            .client()
            .await?
            .query(WAITING, &[&namespaces])
            .await
            .map_err(ClusterError::query("counting waiting expirations"))?;
        let counts: std::collections::HashMap<&str, i64> = counted
            .iter()
            .map(|row| (row.get::<_, &str>(0), row.get::<_, i64>(1)))
            .collect();
        let waiting = namespaces.iter().map(|namespace| {
            let count = counts.get(namespace.as_str()).copied().unwrap_or(0);
            u64::try_from(count).unwrap_or(0)
        });
        Ok(waiting.collect())
    }
}

/// Expirations of the namespaces `$1` that wait to be claimed (as `subscriber::CLAIMABLE`
/// finds them, whatever their attempts), counted by namespace.
const WAITING: &str = concat!(
    "SELECT namespace, count(*) FROM tickd_expirations
     WHERE namespace = ANY($1) AND acked_at IS NULL AND NOT dead AND ",
    claim_lapsed!(),
    " GROUP BY namespace"
);

/// Which claim a retry moves: the live claim of attempt `$3` of expiration `$2`
/// (namespace `$1`); the conditions are an ack's (see `acks::ACK`).
macro_rules! retry_later_conditions {
    () => {
        "
     WHERE namespace = $1 AND seq = $2 AND attempts = $3
       AND acked_at IS NULL AND claimed_by IS NOT NULL AND claim_until > clock_timestamp()"
    };
}

/// Moves the claim (see `retry_later_conditions`) to end `$4` microseconds from now.
const RETRY_LATER_KEPT: &str = concat!(
    "UPDATE tickd_expirations
     SET claim_until = clock_timestamp() + $4::INT8 * INTERVAL '1 microsecond'",
    retry_later_conditions!()
);

/// As [`RETRY_LATER_KEPT`], and the claim is no subscriber's meanwhile: a subscriber's
/// window counts the rows stamped with its name (see `subscriber::CLAIMABLE`), and the
/// claim's end alone keeps the row from being claimed before then.
const RETRY_LATER_RELEASED: &str = concat!(
    "UPDATE tickd_expirations
     SET claim_until = clock_timestamp() + $4::INT8 * INTERVAL '1 microsecond',
         claimed_by = NULL",
    retry_later_conditions!()
);

/// Ends the claim (see `retry_later_conditions`) with its attempt taken back, claimable
/// again `$5` microseconds from now (no subscriber's meanwhile, as a released retry), and
/// wakes the namespace's subscribers (`$4` is the channel they listen on).
const GIVE_BACK: &str = concat!(
    "WITH released AS (
        UPDATE tickd_expirations
        SET claimed_by = NULL, attempts = attempts - 1,
            claim_until = clock_timestamp() + $5::INT8 * INTERVAL '1 microsecond'",
    retry_later_conditions!(),
    " RETURNING namespace)
     SELECT pg_notify($4, namespace)::TEXT FROM released"
);

/// The replicated backend's expirations, seen as the API's [`Expirations`].
impl Expirations for ClusterDeliveries {
    fn subscribe(&self, options: SubscribeOptions) -> Result<DeliveryStream, TimerError> {
        let counted = self.metrics.subscribers.count(&options);
        Ok(counted.around(ClusterDeliveries::subscribe(self, options)?))
    }

    fn ack(&self, namespace: String, delivery_ids: Vec<u64>) -> Answer<AckOutcome> {
        let deliveries = self.clone();
        Answer::work(
            async move { ClusterDeliveries::ack(&deliveries, namespace, delivery_ids).await },
        )
    }

    fn dead(&self, namespace: Option<String>) -> Answer<DeadList> {
        let deliveries = self.clone();
        Answer::work(async move { ClusterDeliveries::dead(&deliveries, namespace).await })
    }

    fn retry_later(
        &self,
        namespace: String,
        delivery_id: u64,
        after: Duration,
        hold: Hold,
    ) -> Answer<bool> {
        let deliveries = self.clone();
        Answer::work(async move {
            ClusterDeliveries::retry_later(&deliveries, namespace, delivery_id, after, hold).await
        })
    }

    fn give_back(&self, namespace: String, delivery_id: u64, when: GiveBack) -> Answer<bool> {
        let deliveries = self.clone();
        Answer::work(async move {
            ClusterDeliveries::give_back(&deliveries, namespace, delivery_id, when).await
        })
    }

    fn recorded(&self) -> Answer<()> {
        // Every change the other calls make is committed before they answer; only the
        // hand-backs of dropped streams run on after.
        let mut handing_back = self.handing_back.subscribe();
        Answer::work(async move {
            let _ = handing_back.wait_for(|count| *count == 0).await;
            Ok(())
        })
    }

    fn waiting(&self, namespaces: Vec<String>) -> Answer<Vec<u64>> {
        let deliveries = self.clone();
        Answer::work(async move { ClusterDeliveries::waiting(&deliveries, namespaces).await })
    }

    fn redrive(&self, namespace: String, ids: Option<Vec<u64>>) -> Answer<RedriveOutcome> {
        let deliveries = self.clone();
        Answer::work(async move { ClusterDeliveries::redrive(&deliveries, namespace, ids).await })
    }
}
