//! The delivery task's bounds across namespaces and its namespace bookkeeping, driven
//! directly (no runtime, no store).

use std::sync::Arc;

use bytes::Bytes;
use tokio::sync::{mpsc, oneshot};

use super::*;
use crate::clock::SystemClock;
use crate::domain::{
    DeadList, Delivered, DeliveryConfig, Expiration, GiveBack, Handoff, RedriveOutcome,
    SubscribeOptions, TimerId,
};
use crate::local::live_namespaces::LiveNamespaces;
use crate::metrics::Metrics;

fn expiration(namespace: &str, id: u64) -> Expiration {
    Expiration {
        trace: None,
        id: TimerId(id),
        namespace: Arc::from(namespace),
        key: None,
        payload: Bytes::from_static(b"payload"),
        deadline_unix: id,
        fired_unix: id,
        repeat: None,
        ttl: None,
        fired_count: 1,
        calendar: None,
        late: false,
        memory: Default::default(),
        over_memory_budget: false,
    }
}

fn delivery(adjust: impl FnOnce(&mut DeliveryConfig)) -> Delivery {
    let mut config = DeliveryConfig::default();
    adjust(&mut config);
    let metrics = Metrics::new();
    let live = Arc::new(LiveNamespaces::new(metrics.namespaces.clone()));
    Delivery::new(
        config,
        None,
        0,
        (metrics, live, Arc::new(SystemClock::new())),
    )
}

fn ids(list: &DeadList) -> Vec<u64> {
    list.dead.iter().map(|dead| dead.expiration.id.0).collect()
}

impl Delivery {
    /// Every count the task keeps agrees with its queues.
    fn check_counts(&self) {
        let waiting: usize = self.namespaces.values().map(|q| q.waiting.len()).sum();
        let in_flight: usize = self.namespaces.values().map(|q| q.in_flight.len()).sum();
        let dead: usize = self.namespaces.values().map(|q| q.dead.len()).sum();
        assert_eq!(self.budget.held(), waiting + in_flight, "held");
        assert_eq!(self.budget.dead(), dead, "dead");
        assert_eq!(self.metrics.delivery_buffered.get(), waiting as i64);
        assert_eq!(self.metrics.delivery_dead.get(), dead as i64);
        assert_eq!(self.metrics.delivery_unacked.get(), in_flight as i64);
        assert_eq!(self.live.len(), self.namespaces.len());
        for queue in self.namespaces.values() {
            assert!(!queue.is_idle(), "an idle queue is kept");
            assert!(queue.dead.len() <= self.config.dead_capacity);
        }
    }

    fn subscribe_to(
        &mut self,
        namespace: &str,
        id: u64,
        window: usize,
    ) -> mpsc::Receiver<Delivered> {
        let (sender, receiver) = mpsc::channel(window);
        let options = SubscribeOptions {
            namespace: namespace.into(),
            observer: false,
            ack_timeout: None,
            max_unacked: Some(window),
            auto_ack: false,
        };
        let rules = options.rules(&self.config.subscriber);
        self.subscribe(options, rules, id, sender);
        receiver
    }
}

#[test]
fn sixty_namespaces_share_one_buffer_and_the_rest_is_dead_and_listed() {
    let mut delivery = delivery(|config| {
        config.buffer_capacity = 1_000;
        config.buffered_total = 100;
    });
    let mut id = 0;
    for _round in 0..5 {
        let batch = (0..60)
            .map(|namespace| {
                id += 1;
                expiration(&format!("ns-{namespace}"), id)
            })
            .collect();
        delivery.enqueue_fired(fresh(batch));
    }
    delivery.check_counts();
    assert_eq!(delivery.budget.held(), 100);
    let all = delivery.dead(None);
    assert_eq!(all.count, 200);
    assert_eq!(ids(&all), (101..=300).collect::<Vec<_>>(), "oldest first");
    let per_namespace: u64 = (0..60)
        .map(|namespace| delivery.dead(Some(&format!("ns-{namespace}"))).count)
        .sum();
    assert_eq!(per_namespace, 200);
    assert_eq!(delivery.metrics.expirations_dead.get(), 200);
}

#[test]
fn the_oldest_dead_across_namespaces_are_dropped_and_emptied_namespaces_forgotten() {
    let mut delivery = delivery(|config| {
        config.buffered_total = 0;
        config.dead_total = 3;
    });
    let batch = ["a", "b", "a", "c", "c"]
        .iter()
        .enumerate()
        .map(|(index, namespace)| expiration(namespace, index as u64 + 1))
        .collect();
    delivery.enqueue_fired(fresh(batch));
    delivery.check_counts();
    assert_eq!(ids(&delivery.dead(None)), [3, 4, 5]);
    assert_eq!(ids(&delivery.dead(Some("a"))), [3]);
    assert!(!delivery.namespaces.contains_key("b"), "b holds nothing");
    assert_eq!(delivery.metrics.expirations_dead_dropped.get(), 2);
}

#[test]
fn dead_count_is_what_is_listed_within_max_dead() {
    let mut delivery = delivery(|config| {
        config.buffer_capacity = 1;
        config.dead_capacity = 3;
    });
    delivery.enqueue_fired(fresh((1..=6).map(|id| expiration("orders", id)).collect()));
    delivery.enqueue_fired(fresh((7..=8).map(|id| expiration("other", id)).collect()));
    delivery.check_counts();
    let orders = delivery.dead(Some("orders"));
    assert_eq!((orders.count, ids(&orders)), (3, vec![4, 5, 6]));
    let all = delivery.dead(None);
    assert_eq!((all.count, ids(&all)), (4, vec![4, 5, 6, 8]));
    assert_eq!(delivery.dead(Some("nowhere")).count, 0);
}

#[test]
fn a_namespace_stays_live_until_both_the_worker_and_delivery_let_go() {
    let mut delivery = delivery(|_| {});
    let live = delivery.live.clone();
    // The worker's hold, as its table takes it.
    live.hold(&Arc::from("orders"));
    let mut stream = delivery.subscribe_to("orders", 1, 10);
    delivery.handoff(vec![
        Handoff::Fired(expiration("orders", 1)),
        Handoff::Forgotten(Arc::from("orders")),
    ]);
    delivery.check_counts();
    assert_eq!(live.len(), 1, "in flight: still live");
    let delivered = stream.try_recv().expect("delivered");
    let (reply, _answer) = tokio::sync::oneshot::channel();
    delivery.ack("orders", vec![delivered.delivery_id], reply);
    delivery.check_counts();
    assert_eq!(live.len(), 1, "subscribed: still live");
    delivery.unsubscribe(&Arc::from("orders"), 1, &[]);
    delivery.check_counts();
    assert_eq!(live.len(), 0);
}

#[test]
fn redeliveries_and_dead_by_attempts_keep_the_counts_right() {
    let mut delivery = delivery(|config| {
        config.buffered_total = 2;
        config.max_attempts = 2;
    });
    let mut stream = delivery.subscribe_to("orders", 1, 10);
    delivery.enqueue_fired(fresh((1..=3).map(|id| expiration("orders", id)).collect()));
    delivery.check_counts();
    assert_eq!(
        delivery.dead(None).count,
        1,
        "the third found the buffer full"
    );
    // The subscriber leaves twice without acking: the two come back, then are dead.
    for attempt in 1..=2 {
        assert_eq!(stream.try_recv().unwrap().attempt, attempt);
        assert_eq!(stream.try_recv().unwrap().attempt, attempt);
        delivery.unsubscribe(&Arc::from("orders"), attempt.into(), &[]);
        delivery.check_counts();
        stream = delivery.subscribe_to("orders", u64::from(attempt) + 1, 10);
    }
    delivery.check_counts();
    assert_eq!(delivery.budget.held(), 0);
    assert_eq!(delivery.dead(Some("orders")).count, 3);
}

#[test]
fn redriven_dead_expirations_are_delivered_again_with_attempt_one() {
    let mut delivery = delivery(|config| {
        config.buffer_capacity = 2;
        config.max_attempts = 1;
    });
    // Two wait in the buffer, three find it full and die; the two die unacknowledged.
    delivery.enqueue_fired(fresh((1..=5).map(|id| expiration("orders", id)).collect()));
    let mut stream = delivery.subscribe_to("orders", 1, 10);
    assert_eq!(stream.try_recv().unwrap().attempt, 1);
    assert_eq!(stream.try_recv().unwrap().attempt, 1);
    delivery.unsubscribe(&Arc::from("orders"), 1, &[]);
    delivery.check_counts();
    let dead = delivery.dead(Some("orders"));
    let order = ids(&dead);
    assert_eq!(order[..3], [3, 4, 5], "in the order they died");
    let dead_id_of = |timer: u64| {
        dead.dead
            .iter()
            .find(|dead| dead.expiration.id.0 == timer)
            .map(|dead| dead.id)
            .expect("listed")
    };

    // Two named (and one that is not dead), with a subscriber to take them.
    let mut stream = delivery.subscribe_to("orders", 2, 10);
    let outcome = redrive(
        &mut delivery,
        "orders",
        Some(vec![dead_id_of(1), dead_id_of(3), 999_999]),
    );
    assert_eq!(outcome.redriven, 2);
    assert_eq!(outcome.not_dead, [999_999]);
    delivery.check_counts();
    let first = stream.try_recv().expect("redriven");
    let second = stream.try_recv().expect("redriven");
    assert_eq!(
        (first.expiration.id.0, first.attempt),
        (3, 1),
        "oldest dead first"
    );
    assert_eq!((second.expiration.id.0, second.attempt), (1, 1));
    assert!(stream.try_recv().is_err());
    assert_eq!(ids(&delivery.dead(Some("orders"))), [4, 5, 2]);
    assert_eq!(order[3..].len(), 2);

    // All the rest, within the buffer's room (2): one stays dead.
    delivery.unsubscribe(&Arc::from("orders"), 2, &[]);
    let (reply, _answer) = tokio::sync::oneshot::channel();
    delivery.ack("orders", vec![first.delivery_id, second.delivery_id], reply);
    delivery.check_counts();
    let dead = delivery.dead(Some("orders")).count;
    let outcome = redrive(&mut delivery, "orders", None);
    delivery.check_counts();
    assert_eq!(outcome.redriven, 2, "the buffer holds two");
    assert_eq!(delivery.dead(Some("orders")).count, dead - 2);
    assert!(outcome.not_dead.is_empty());
    // A namespace with nothing dead: every id is reported.
    let outcome = redrive(&mut delivery, "elsewhere", Some(vec![7]));
    assert_eq!((outcome.redriven, outcome.not_dead), (0, vec![7]));
}

#[test]
fn a_firing_past_the_memory_budget_is_dead_and_each_charge_is_given_back_once_settled() {
    let budget = crate::budget::MemoryBudget::new(
        1_000,
        crate::budget::memory::BudgetSource::Flag,
        prometheus_client::metrics::gauge::Gauge::default(),
    );
    let mut delivery = delivery(|_| {});
    let mut charged = expiration("ns", 1);
    charged.memory = crate::budget::MemoryReservation::forced(&budget, 600);
    let mut over = expiration("ns", 2);
    over.memory = crate::budget::MemoryReservation::forced(&budget, 600);
    over.over_memory_budget = true;
    delivery.enqueue_fired(fresh(vec![charged, over]));
    delivery.check_counts();
    assert_eq!(
        delivery.budget.held(),
        1,
        "the charged one waits for delivery"
    );
    let dead = delivery.dead(Some("ns"));
    assert_eq!(
        ids(&dead),
        [2],
        "the one past the budget is dead, kept with its payload"
    );
    assert_eq!(dead.dead[0].reason, "memory budget full");
    assert_eq!(budget.used(), 1_200, "both still held");
    drop(dead);
    let mut deliveries = delivery.subscribe_to("ns", 7, 10);
    let delivered = deliveries.try_recv().expect("delivered at once");
    let (reply, _answer) = oneshot::channel();
    delivery.ack("ns", vec![delivered.delivery_id], reply);
    drop(delivered);
    assert_eq!(budget.used(), 600, "the settled one gave its bytes back");
}

/// Expirations that just fired: no delivery yet.
fn fresh(batch: Vec<Expiration>) -> Vec<(Expiration, u32)> {
    batch
        .into_iter()
        .map(|expiration| (expiration, 0))
        .collect()
}

/// Redrives, as the task's handler does; without a log the answer comes at once.
fn redrive(delivery: &mut Delivery, namespace: &str, ids: Option<Vec<u64>>) -> RedriveOutcome {
    let (reply, mut answer) = tokio::sync::oneshot::channel();
    delivery.redrive(namespace, ids, reply);
    answer.try_recv().expect("answered at once without a log")
}

/// With a log, a delivery waits for its attempt's write, holding its place in the stream
/// meanwhile: a dispatch never hands out more than the stream can take, even when
/// deliveries read late still fill part of it; and an ack deadline that passes before the
/// delivery has left does not take it back.
#[test]
fn deliveries_waiting_for_their_attempts_hold_their_place_in_the_stream() {
    let dir = tempfile::tempdir().unwrap();
    let (store, handle, _) = crate::local::store::Store::open(
        dir.path(),
        crate::local::store::SyncMode::Always,
        Metrics::new(),
        0,
        |_| {},
    )
    .unwrap();
    let metrics = Metrics::new();
    let live = Arc::new(LiveNamespaces::new(metrics.namespaces.clone()));
    let clock = Arc::new(SystemClock::new());
    let mut delivery = Delivery::new(
        DeliveryConfig::default(),
        Some(handle),
        1,
        (metrics, live, clock),
    );
    let mut stream = delivery.subscribe_to("orders", 1, 3);
    delivery.enqueue_fired(fresh((1..=2).map(|id| expiration("orders", id)).collect()));
    // Their deadlines pass before the subscriber reads them: taken back, they wait again,
    // while the two stale deliveries still fill two of the stream's three places.
    for id in queue_in_flight_ids(&delivery) {
        delivery.take_back(&Arc::from("orders"), id);
    }
    delivery.enqueue_fired(fresh((3..=5).map(|id| expiration("orders", id)).collect()));
    let queue = &delivery.namespaces["orders"];
    assert_eq!(queue.in_flight.len(), 1, "the one place left");
    assert_eq!(queue.waiting.len(), 4);
    // As the task does when the store's written mark moves.
    let log = delivery.store.clone().expect("a store");
    crate::local::store::watermark::block_until_passed(&log, |marks| marks.written);
    delivery.release_passed();
    let received: Vec<(u64, u32)> = (0..3)
        .map(|_| {
            let delivered = stream.blocking_recv().expect("sent once written");
            (delivered.expiration.id.0, delivered.attempt)
        })
        .collect();
    assert_eq!(
        received,
        [(1, 1), (2, 1), (1, 2)],
        "the stale two, then the first again"
    );
    delivery.check_counts();

    // A deadline that passes before its delivery left starts again.
    let unsent = queue_in_flight_ids(&delivery)[0];
    delivery
        .namespaces
        .get_mut("orders")
        .unwrap()
        .in_flight
        .get_mut(&unsent)
        .unwrap()
        .left = Some(Arc::default());
    assert!(delivery.restart_unsent(&Arc::from("orders"), unsent));
    assert!(delivery.namespaces["orders"]
        .in_flight
        .contains_key(&unsent));
    drop((delivery, log));
    store.join();
}

fn queue_in_flight_ids(delivery: &Delivery) -> Vec<u64> {
    delivery.namespaces["orders"]
        .in_flight
        .keys()
        .copied()
        .collect()
}

#[test]
fn a_delivery_that_never_reached_its_client_comes_back_as_the_attempt_it_was() {
    // One attempt each: a hand-back that spent one would bury them.
    let mut delivery = delivery(|config| config.max_attempts = 1);
    let mut stream = delivery.subscribe_to("orders", 1, 10);
    delivery.enqueue_fired(fresh((1..=3).map(|id| expiration("orders", id)).collect()));
    let taken = stream.try_recv().expect("delivered");
    let given = stream.try_recv().expect("delivered");
    let left_inside = stream.try_recv().expect("delivered");
    assert!(delivery.give_back(&Arc::from("orders"), given.delivery_id, GiveBack::Leaving));
    assert!(
        !delivery.give_back(&Arc::from("orders"), given.delivery_id, GiveBack::Leaving),
        "given back once"
    );
    // Who gives back is leaving: nothing more goes to its stream, not even that one.
    assert!(stream.try_recv().is_err(), "dispatched to a leaving stream");
    // The stream goes with one it never took: it stays alive; the one it took is dead.
    delivery.unsubscribe(&Arc::from("orders"), 1, &[left_inside.delivery_id]);
    delivery.check_counts();
    assert_eq!(ids(&delivery.dead(Some("orders"))), [taken.expiration.id.0]);
    let mut stream = delivery.subscribe_to("orders", 2, 10);
    let mut back: Vec<(u64, u32)> = (0..2)
        .map(|_| stream.try_recv().expect("back"))
        .map(|delivered| (delivered.expiration.id.0, delivered.attempt))
        .collect();
    back.sort_unstable();
    assert_eq!(
        back,
        [(given.expiration.id.0, 1), (left_inside.expiration.id.0, 1)]
    );
    delivery.check_counts();
}
