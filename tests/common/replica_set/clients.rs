//! The clients of a replica set's tests: which replicas they may call ([`Live`]), a
//! [`Registrar`] registering timers through them in turn, subscribers consuming on each
//! replica and acknowledging (at once, or when an [`AckGate`] opens), all recording into
//! a [`SharedLedger`], and [`Background`] to run and stop them.

use std::collections::HashMap;
use std::future::Future;
use std::net::SocketAddr;
use std::ops::RangeInclusive;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tickd::proto::timers_client::TimersClient;
use tickd::proto::*;
use tokio::sync::watch;
use tokio::task::JoinSet;
use tonic::transport::Channel;

use super::ledger::{AckOutcome, Delivery, SharedLedger};
use super::{client_for, ReplicaSet, POLL};
use crate::common::rpc::{millis, now_unix_nanos, spec, unix_nanos};

/// The namespace the registrar and the consumers use.
pub(crate) const NAMESPACE: &str = "replicas";
/// The ack deadline of the consumers' subscriptions: a claim not acknowledged within it is
/// delivered again.
pub(crate) const ACK_TIMEOUT_MS: u64 = 5_000;
const MAX_UNACKED: u32 = 1_000;
/// Pause between registrations of a continuous load: a steady trickle, not a flood.
const LOAD_PACE: Duration = Duration::from_millis(20);
/// Pause before a subscriber tries another replica, so a dead one is not hammered.
const RECONNECT_PAUSE: Duration = Duration::from_millis(50);
/// A bound on one registration or ack call, so that a replica cut off from its database
/// costs a client an error, not a hang.
const CALL_TIMEOUT: Duration = Duration::from_secs(10);

/// A replica clients may call.
#[derive(Clone, Debug)]
pub(crate) struct ReplicaAddr {
    pub(crate) id: String,
    pub(crate) addr: SocketAddr,
}

/// The replicas clients may use right now, shared between a test and its client tasks: a
/// replica is taken out before it is killed, paused or stopped.
#[derive(Clone, Default)]
pub(crate) struct Live(Arc<Mutex<Vec<ReplicaAddr>>>);

impl Live {
    pub(crate) fn insert(&self, replica: ReplicaAddr) {
        let mut live = self.0.lock().unwrap();
        live.retain(|other| other.id != replica.id);
        live.push(replica);
    }

    pub(crate) fn remove(&self, id: &str) {
        self.0.lock().unwrap().retain(|replica| replica.id != id);
    }

    /// The live replica for call number `turn`, round robin, leaving out `avoided`.
    fn in_turn(&self, turn: usize, avoided: &[String]) -> Option<ReplicaAddr> {
        let live = self.0.lock().unwrap();
        let usable: Vec<&ReplicaAddr> = live
            .iter()
            .filter(|replica| !avoided.contains(&replica.id))
            .collect();
        (!usable.is_empty()).then(|| usable[turn % usable.len()].clone())
    }

    /// `home` while it is live, otherwise another live replica, a different one each turn.
    fn home_or_other(&self, home: &str, turn: usize) -> Option<ReplicaAddr> {
        let at_home = self
            .0
            .lock()
            .unwrap()
            .iter()
            .find(|r| r.id == home)
            .cloned();
        at_home.or_else(|| self.in_turn(turn, &[]))
    }
}

/// Registers timers through the live replicas in turn, recording each acknowledged one.
pub(crate) struct Registrar {
    live: Live,
    /// Where its timers go: [`NAMESPACE`] unless told otherwise.
    namespace: String,
    /// Replicas it never calls, though live.
    avoided: Vec<String>,
    ledger: SharedLedger,
    /// Delays (ms), spread evenly over this range.
    delays: RangeInclusive<u64>,
    clients: HashMap<SocketAddr, TimersClient<Channel>>,
    sequence: u64,
}

impl Registrar {
    pub(crate) fn new(
        set: &ReplicaSet,
        ledger: &SharedLedger,
        delays: RangeInclusive<u64>,
    ) -> Registrar {
        Registrar {
            live: set.live.clone(),
            namespace: NAMESPACE.into(),
            avoided: Vec::new(),
            ledger: ledger.clone(),
            delays,
            clients: HashMap::new(),
            sequence: 0,
        }
    }

    /// Registers in `namespace` instead of [`NAMESPACE`] (one a sink pushes, say, which
    /// the consumers here leave alone).
    pub(crate) fn in_namespace(mut self, namespace: &str) -> Registrar {
        self.namespace = namespace.into();
        self
    }

    /// Never through `ids` (replicas under test, say), only through the others.
    pub(crate) fn avoiding(mut self, ids: &[&str]) -> Registrar {
        self.avoided = ids.iter().map(|&id| id.into()).collect();
        self
    }

    pub(crate) async fn register(&mut self, count: usize) {
        for _ in 0..count {
            self.register_one().await;
        }
    }

    /// Registers at a steady pace until `stop`.
    pub(crate) async fn run_until(mut self, mut stop: watch::Receiver<bool>) {
        while !*stop.borrow() {
            self.register_one().await;
            tokio::select! {
                () = tokio::time::sleep(LOAD_PACE) => {}
                _ = stop.wait_for(|stopped| *stopped) => {}
            }
        }
    }

    /// Registers about `per_second` timers a second until `stop`: every [`LOAD_PACE`], one
    /// NewTimeouts call of the timers that tick is owed (more after a slow call, so the
    /// rate holds on average), each call through the next live replica. An item or a call
    /// refused leaves its timers' outcome unknown (not required to fire), as in
    /// [`Registrar::register_one`].
    pub(crate) async fn run_at_rate(mut self, per_second: u64, mut stop: watch::Receiver<bool>) {
        let started = tokio::time::Instant::now();
        let mut sent: u64 = 0;
        let mut ticks = tokio::time::interval(LOAD_PACE);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        while !*stop.borrow() {
            let owed =
                (started.elapsed().as_millis() as u64 * per_second / 1_000).saturating_sub(sent);
            if owed > 0 {
                self.register_batch(owed as usize).await;
                sent += owed;
            }
            tokio::select! {
                _ = ticks.tick() => {}
                _ = stop.wait_for(|stopped| *stopped) => {}
            }
        }
    }

    /// The client this registrar keeps for the replica at `addr`.
    fn client_of(&mut self, addr: SocketAddr) -> TimersClient<Channel> {
        self.clients
            .entry(addr)
            .or_insert_with(|| client_for(addr, Some(CALL_TIMEOUT)))
            .clone()
    }

    /// `count` timers in one NewTimeouts call through the next live replica.
    async fn register_batch(&mut self, count: usize) {
        self.sequence += 1;
        let Some(replica) = self.live.in_turn(self.sequence as usize, &self.avoided) else {
            self.ledger.lock().unwrap().register_errors += count as u64;
            return;
        };
        let mut client = self.client_of(replica.addr);
        let timers = (0..count)
            .map(|_| {
                self.sequence += 1;
                spec(&self.namespace, self.next_delay(), b"")
            })
            .collect();
        let answer = client.new_timeouts(NewTimeoutsRequest { timers }).await;
        let mut ledger = self.ledger.lock().unwrap();
        let Ok(response) = answer else {
            ledger.register_errors += count as u64;
            return;
        };
        for item in response.into_inner().results {
            match item.result {
                Some(new_timeout_result::Result::Registered(registered)) => {
                    let timer = registered.timer.expect("timer");
                    let deadline = unix_nanos(timer.deadline.as_ref().expect("deadline"));
                    ledger.registered.insert(timer.id, deadline);
                }
                _ => ledger.register_errors += 1,
            }
        }
    }

    /// One registration through the next live replica; an error (the replica died under
    /// the call) leaves the outcome unknown, so the timer is not required to fire.
    pub(crate) async fn register_one(&mut self) {
        self.sequence += 1;
        let Some(replica) = self.live.in_turn(self.sequence as usize, &self.avoided) else {
            tokio::time::sleep(POLL).await;
            return;
        };
        let mut client = self.client_of(replica.addr);
        let request = NewTimeoutRequest {
            timer: Some(spec(&self.namespace, self.next_delay(), b"")),
        };
        let answer = client.new_timeout(request).await;
        let mut ledger = self.ledger.lock().unwrap();
        match answer {
            Ok(response) => {
                let timer = response.into_inner().timer.expect("timer");
                let deadline = unix_nanos(timer.deadline.as_ref().expect("deadline"));
                ledger.registered.insert(timer.id, deadline);
            }
            Err(_) => ledger.register_errors += 1,
        }
    }

    /// Spreads delays over the range with a stride coprime to most ranges' lengths.
    fn next_delay(&self) -> u64 {
        let span = self.delays.end() - self.delays.start() + 1;
        self.delays.start() + (self.sequence * 7_919) % span
    }
}

/// Holds a subscriber's acks while closed: what it receives meanwhile stays in flight
/// (claimed, unacknowledged) until the gate opens.
pub(crate) struct AckGate(watch::Sender<bool>);

impl AckGate {
    pub(crate) fn open() -> AckGate {
        AckGate(watch::Sender::new(true))
    }

    pub(crate) fn close(&self) {
        self.0.send_replace(false);
    }

    pub(crate) fn reopen(&self) {
        self.0.send_replace(true);
    }

    fn watch(&self) -> watch::Receiver<bool> {
        self.0.subscribe()
    }
}

/// When a subscriber acknowledges what it receives.
#[derive(Clone)]
enum AckPolicy {
    /// As each delivery arrives, in a task of its own, reading on without waiting for
    /// the answer: how a subscriber that keeps up acks. One that awaited each ack before
    /// reading the next would take a round trip a delivery, and in a backlog (a window of
    /// [`MAX_UNACKED`] claimed at once) its last deliveries would wait out their ack
    /// deadline in the stream and come again, which is the ack timeout doing its job,
    /// not what these tests look at.
    AtOnce,
    /// When the gate is open (at once while it is).
    Gated(watch::Receiver<bool>),
}

/// A subscriber on each of `ids`, acknowledging at once, running in the background.
pub(crate) fn consume_on_each(set: &ReplicaSet, ledger: &SharedLedger, ids: &[&str]) -> Background {
    let consumers = Background::new();
    for id in ids {
        consumers.consume_on(set, ledger, id);
    }
    consumers
}

impl Background {
    /// A subscriber on replica `id` (on another live one while it is not live),
    /// acknowledging each delivery at once.
    pub(crate) fn consume_on(&self, set: &ReplicaSet, ledger: &SharedLedger, id: &str) {
        self.spawn(consume(
            id.into(),
            set.live.clone(),
            ledger.clone(),
            AckPolicy::AtOnce,
            self.stop_signal(),
        ));
    }

    /// [`Background::consume_on`], acknowledging only while `gate` is open.
    pub(crate) fn consume_gated_on(
        &self,
        set: &ReplicaSet,
        ledger: &SharedLedger,
        id: &str,
        gate: &AckGate,
    ) {
        self.spawn(consume(
            id.into(),
            set.live.clone(),
            ledger.clone(),
            AckPolicy::Gated(gate.watch()),
            self.stop_signal(),
        ));
    }
}

/// Subscribes on `home` (or, while it is down, on another live replica), moving to another
/// live replica whenever the stream ends or fails, until `stop`. Each delivery is recorded,
/// then acknowledged on the replica it came from, as `policy` says.
async fn consume(
    home: String,
    live: Live,
    ledger: SharedLedger,
    policy: AckPolicy,
    mut stop: watch::Receiver<bool>,
) {
    let mut turn = 0;
    while !*stop.borrow() {
        turn += 1;
        if let Some(replica) = live.home_or_other(&home, turn) {
            tokio::select! {
                () = consume_from(&replica, &ledger, &policy) => {}
                _ = stop.wait_for(|stopped| *stopped) => return,
            }
        }
        tokio::select! {
            () = tokio::time::sleep(RECONNECT_PAUSE) => {}
            _ = stop.wait_for(|stopped| *stopped) => return,
        }
    }
}

/// One subscription, until its stream ends or fails.
async fn consume_from(replica: &ReplicaAddr, ledger: &SharedLedger, policy: &AckPolicy) {
    // No request timeout on the stream: it would cut it.
    let mut client = client_for(replica.addr, None);
    let acks = client_for(replica.addr, Some(CALL_TIMEOUT));
    let request = SubscribeRequest {
        namespace: NAMESPACE.into(),
        ack_timeout: Some(millis(ACK_TIMEOUT_MS)),
        max_unacked: MAX_UNACKED,
        ..Default::default()
    };
    let Ok(response) = client.subscribe(request).await else {
        return;
    };
    let mut stream = response.into_inner();
    while let Ok(Some(message)) = stream.message().await {
        let Some(expiration) = message.expiration else {
            continue;
        };
        let delivery = Delivery {
            timer_id: expiration.timer.as_ref().expect("timer").id.clone(),
            fired_at: unix_nanos(expiration.fired_at.as_ref().expect("fired_at")),
            attempt: expiration.attempt,
            replica: replica.id.clone(),
            received_at: now_unix_nanos(),
            ack: AckOutcome::Awaiting,
        };
        let index = ledger.lock().unwrap().delivered(delivery);
        let acking = acknowledge(acks.clone(), expiration.delivery_id, ledger.clone(), index);
        match policy {
            AckPolicy::AtOnce => drop(tokio::spawn(acking)),
            AckPolicy::Gated(gate) => {
                let mut gate = gate.clone();
                // The stream goes on meanwhile: its later deliveries wait behind the gate too.
                tokio::spawn(async move {
                    let _ = gate.wait_for(|open| *open).await;
                    acking.await;
                });
            }
        }
    }
}

/// Acks one delivery and records the outcome. A lost ack only means a redelivery later.
async fn acknowledge(
    mut client: TimersClient<Channel>,
    delivery_id: String,
    ledger: SharedLedger,
    index: usize,
) {
    let answer = client
        .ack(AckRequest {
            namespace: NAMESPACE.into(),
            delivery_ids: vec![delivery_id],
        })
        .await;
    let outcome = match answer {
        Ok(response) if response.get_ref().unknown.is_empty() => AckOutcome::Acknowledged,
        Ok(_) => AckOutcome::NotAwaiting,
        Err(status) => AckOutcome::Failed(format!("{:?}: {}", status.code(), status.message())),
    };
    ledger.lock().unwrap().acked(index, outcome);
}

/// Client tasks sharing one stop signal.
pub(crate) struct Background {
    stop: watch::Sender<bool>,
    tasks: Mutex<JoinSet<()>>,
}

impl Background {
    pub(crate) fn new() -> Background {
        Background {
            stop: watch::Sender::new(false),
            tasks: Mutex::new(JoinSet::new()),
        }
    }

    pub(crate) fn stop_signal(&self) -> watch::Receiver<bool> {
        self.stop.subscribe()
    }

    pub(crate) fn spawn(&self, task: impl Future<Output = ()> + Send + 'static) {
        self.tasks.lock().unwrap().spawn(task);
    }

    /// Signals stop, and waits for every task (a task's panic fails the test here).
    pub(crate) async fn stop(self) {
        self.stop.send_replace(true);
        let mut tasks = self.tasks.into_inner().unwrap();
        while let Some(result) = tasks.join_next().await {
            if let Err(error) = result {
                std::panic::resume_unwind(error.into_panic());
            }
        }
    }
}
