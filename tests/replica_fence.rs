//! A replica cut off from PostgreSQL while timers fire, through a proxy that black-holes
//! its connections (no error, only silence) for longer than its lease and then resets
//! them: the fence and redelivery, end to end.
//!
//! Three replicas share the partitions; the victim reaches the database through a
//! [`PgProxy`] of its own, so only it is cut off. Timers are registered at a steady pace
//! through the two healthy replicas, due before, during and after the cut; a subscriber
//! on every replica (the victim's included) records each delivery in a ledger and
//! acknowledges it. The victim's subscriber holds its acks just before the cut, so that it
//! has deliveries in flight (received, not acknowledged) when its connections go silent.
//! The test then asserts:
//!
//! - nothing acknowledged is lost: every registration a replica acknowledged is delivered
//!   and acknowledged, and the database ends with nothing pending or unacknowledged;
//! - each timer fires once (one `fired_at`), and a second delivery is only a redelivery
//!   (a higher attempt number, never the same one twice);
//! - the deliveries in flight on the victim when it was cut are delivered again, by the
//!   other replicas, with a higher attempt;
//! - the victim delivers nothing fired after it lost its lease while it is cut off: its
//!   leases lapse at the latest a lease after the cut (its last renewal reached the
//!   database before), so no delivery received on its streams during the cut may carry a
//!   `fired_at` after that (or after the takeover was seen, if earlier). The victim's own
//!   partitions' timers are meanwhile fired by their new owners, so there is something it
//!   could wrongly have delivered: a design where an owner delivers from its memory, or a
//!   fence that let it fire, would fail here;
//! - after the reset the victim finds its partitions taken (their epochs increased), says
//!   so, and rejoins: it owns partitions again and takes registrations.
//!
//! Every wait is for an event (a row, a delivery, a log line) bounded by a generous
//! patience; nothing asserts how fast anything happened.

mod common;

use std::collections::BTreeMap;
use std::future::ready;
use std::time::Duration;

use common::replica_set::clients::{AckGate, Background, Registrar, NAMESPACE};
use common::replica_set::ledger::{
    assert_each_timer_fired_once, registered_at_least, AckOutcome, Delivery, FirstDeliveries,
    Ledger, SharedLedger,
};
use common::replica_set::partitions::assert_epochs_increased;
use common::replica_set::{
    client_for, lost_lease_lines, noticed_lost_leases, ReplicaSet, Settings, LEASE_TTL,
};
use common::tooling::skip_postgres;
use common::*;

const PARTITIONS: usize = 16;
const HEALTHY: [&str; 2] = ["r1", "r2"];
const VICTIM: &str = "victim";
/// Deliveries the victim's subscriber must hold unacknowledged before the cut.
const IN_FLIGHT_AT_CUT: usize = 3;
/// Expirations of the victim's partitions its successors must have fired (after the
/// takeover was seen) while the victim is still cut off.
const FIRED_BY_SUCCESSORS: usize = 5;
/// How long one registration through the rejoining victim may take.
const CALL_PATIENCE: Duration = Duration::from_secs(10);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_cut_off_from_the_database_is_fenced_and_its_deliveries_redelivered() {
    if skip_postgres("a_replica_cut_off_from_the_database_is_fenced_and_its_deliveries_redelivered")
    {
        return;
    }
    let settings = Settings {
        partitions: PARTITIONS,
        ..Settings::default()
    };
    let mut set = ReplicaSet::start_with(settings, &HEALTHY).await;
    set.start_replica_through_proxy(VICTIM).await;
    let ledger = SharedLedger::default();
    let gate = AckGate::open();
    let consumers = Background::new();
    for id in HEALTHY {
        consumers.consume_on(&set, &ledger, id);
    }
    consumers.consume_gated_on(&set, &ledger, VICTIM, &gate);
    let registrations = Background::new();
    let registrar = Registrar::new(&set, &ledger, 500..=6_000).avoiding(&[VICTIM]);
    registrations.spawn(registrar.run_until(registrations.stop_signal()));

    set.eventually("each replica owns a partition", || {
        set.each_owns_a_partition(&[HEALTHY[0], HEALTHY[1], VICTIM])
    })
    .await;
    set.eventually("100 registrations acknowledged", || {
        ready(registered_at_least(&ledger, 100))
    })
    .await;
    set.eventually("the victim's subscriber acknowledged a delivery", || {
        ready(victim_acknowledged_one(&ledger.lock().unwrap()))
    })
    .await;

    // Deliveries received from now on are acknowledged only once the victim is cut off.
    gate.close();
    let held_from = now_unix_nanos();
    set.eventually("the victim's subscriber holds deliveries in flight", || {
        ready(holds_in_flight(&ledger.lock().unwrap(), held_from))
    })
    .await;
    let victim_epochs = set.partitions_owned_by(VICTIM).await;
    assert!(!victim_epochs.is_empty(), "{VICTIM} owns no partition");
    let lost_before_cut = lost_lease_lines(set.daemon(VICTIM));
    let cut_at = now_unix_nanos();
    set.proxy(VICTIM).black_hole();
    gate.reopen();

    set.eventually("the victim's partitions taken over", || {
        set.taken_over(VICTIM, &victim_epochs)
    })
    .await;
    let taken_over_at = now_unix_nanos();
    assert_epochs_increased(&victim_epochs, &set.partitions().await);
    set.eventually(
        "the successors fire the victim's partitions' timers",
        || {
            let ledger = ledger.lock().unwrap();
            ready(fired_by_successors(&ledger, &victim_epochs, taken_over_at))
        },
    )
    .await;
    set.eventually("the victim's deliveries in flight delivered again", || {
        let ledger = ledger.lock().unwrap();
        ready(in_flight_redelivered(&ledger, held_from, cut_at))
    })
    .await;
    let reset_at = now_unix_nanos();
    set.proxy(VICTIM).reset();
    eprintln!(
        "cut for {} ms; takeover seen {} ms after the cut (lease ttl {LEASE_TTL:?})",
        (reset_at - cut_at) / 1_000_000,
        (taken_over_at - cut_at) / 1_000_000
    );

    rejoin(&set, &ledger, &victim_epochs, lost_before_cut).await;
    registrations.stop().await;
    set.eventually(
        "every acknowledged registration acknowledged by a subscriber",
        || {
            let unacknowledged = ledger.lock().unwrap().unacknowledged();
            ready(match unacknowledged.len() {
                0 => Ok(()),
                count => Err(format!("{count} not acknowledged yet: {unacknowledged:?}")),
            })
        },
    )
    .await;
    set.wait_until_drained().await;
    set.eventually("every ack call answered", || {
        ready(no_ack_awaited(&ledger.lock().unwrap()))
    })
    .await;
    consumers.stop().await;

    let ledger = ledger.lock().unwrap();
    eprintln!("{}", ledger.summary());
    assert_each_timer_fired_once(&ledger, FirstDeliveries::AtMostOne);
    let lease_lost_by = (cut_at + LEASE_TTL.as_nanos() as i128).min(taken_over_at);
    assert_victim_silent_after_its_lease(&ledger, cut_at, reset_at, lease_lost_by);
    let in_flight = in_flight_at_cut(&ledger, held_from, cut_at);
    assert!(
        !in_flight.is_empty(),
        "the test made no delivery in flight on the victim"
    );
    if let Err(missing) = in_flight_redelivered(&ledger, held_from, cut_at) {
        panic!("{missing}");
    }
}

/// The victim, reconnected, finds its partitions taken, says so, wins partitions again
/// at new epochs, and takes a registration (which must then fire like the others).
async fn rejoin(
    set: &ReplicaSet,
    ledger: &SharedLedger,
    victim_epochs: &BTreeMap<i32, i64>,
    lost_before_cut: usize,
) {
    set.eventually("the victim notices it lost its leases", || {
        ready(noticed_lost_leases(set.daemon(VICTIM), lost_before_cut))
    })
    .await;
    set.eventually("the victim owns a partition again", || {
        set.owns_a_partition(VICTIM)
    })
    .await;
    let now_owned = set.partitions_owned_by(VICTIM).await;
    for (partition, epoch) in &now_owned {
        if let Some(at_cut) = victim_epochs.get(partition) {
            assert!(
                epoch > at_cut,
                "partition {partition}: the victim owns it again at epoch {epoch}, \
                 not after the {at_cut} it was cut off at"
            );
        }
    }
    set.eventually("the victim takes a registration", || {
        // A bound on the call: a replica still stuck on its old connections must cost an
        // attempt, not hang the test.
        let mut client = client_for(set.daemon(VICTIM).addr, Some(CALL_PATIENCE));
        let ledger = ledger.clone();
        async move {
            let timer = client
                .new_timeout(NewTimeoutRequest {
                    timer: Some(spec(NAMESPACE, 500, b"")),
                })
                .await
                .map_err(|status| format!("{status:?}"))?
                .into_inner()
                .timer
                .expect("timer");
            let deadline = unix_nanos(timer.deadline.as_ref().expect("deadline"));
            ledger.lock().unwrap().registered.insert(timer.id, deadline);
            Ok(())
        }
    })
    .await;
}

fn from_victim(delivery: &&Delivery) -> bool {
    delivery.replica == VICTIM
}

/// The partition a timer's rows are in (`id % partitions`; ids are shown in hexadecimal).
fn partition_of(timer_id: &str) -> i32 {
    let id = u64::from_str_radix(timer_id, 16).expect("a hexadecimal timer id");
    (id % PARTITIONS as u64) as i32
}

fn victim_acknowledged_one(ledger: &Ledger) -> Result<(), String> {
    let acknowledged = ledger
        .deliveries
        .iter()
        .filter(from_victim)
        .any(|delivery| delivery.ack == AckOutcome::Acknowledged);
    acknowledged
        .then_some(())
        .ok_or_else(|| "none yet".to_string())
}

/// The victim's deliveries received since its acks were held, up to the cut: their acks
/// are attempted only once it is cut off, so none can settle them.
fn in_flight_at_cut(ledger: &Ledger, held_from: i128, cut_at: i128) -> Vec<&Delivery> {
    ledger
        .deliveries
        .iter()
        .filter(from_victim)
        .filter(|delivery| (held_from..cut_at).contains(&delivery.received_at))
        .collect()
}

fn holds_in_flight(ledger: &Ledger, held_from: i128) -> Result<(), String> {
    match in_flight_at_cut(ledger, held_from, i128::MAX).len() {
        held if held >= IN_FLIGHT_AT_CUT => Ok(()),
        held => Err(format!("{held} of {IN_FLIGHT_AT_CUT} held")),
    }
}

/// Each delivery in flight at the cut delivered again, on another replica's stream, with
/// a higher attempt.
fn in_flight_redelivered(ledger: &Ledger, held_from: i128, cut_at: i128) -> Result<(), String> {
    let by_timer = ledger.deliveries_by_timer();
    let missing: Vec<&Delivery> = in_flight_at_cut(ledger, held_from, cut_at)
        .into_iter()
        .filter(|held| {
            !by_timer[held.timer_id.as_str()]
                .iter()
                .any(|again| again.replica != VICTIM && again.attempt > held.attempt)
        })
        .collect();
    match missing.len() {
        0 => Ok(()),
        count => Err(format!(
            "{count} deliveries in flight on the victim at the cut not delivered again \
             elsewhere: {missing:?}"
        )),
    }
}

/// The healthy replicas delivered expirations of the victim's partitions fired after the
/// takeover was seen: what the victim might wrongly have fired or delivered too.
fn fired_by_successors(
    ledger: &Ledger,
    victim_epochs: &BTreeMap<i32, i64>,
    taken_over_at: i128,
) -> Result<(), String> {
    let fired = ledger
        .deliveries
        .iter()
        .filter(|delivery| delivery.replica != VICTIM && delivery.fired_at > taken_over_at)
        .filter(|delivery| victim_epochs.contains_key(&partition_of(&delivery.timer_id)))
        .count();
    match fired {
        fired if fired >= FIRED_BY_SUCCESSORS => Ok(()),
        fired => Err(format!("{fired} of {FIRED_BY_SUCCESSORS} so far")),
    }
}

fn no_ack_awaited(ledger: &Ledger) -> Result<(), String> {
    let awaited = ledger
        .deliveries
        .iter()
        .filter(|delivery| delivery.ack == AckOutcome::Awaiting)
        .count();
    match awaited {
        0 => Ok(()),
        awaited => Err(format!("{awaited} ack calls unanswered")),
    }
}

/// While cut off (from `cut_at` to `reset_at`), nothing fired after `lease_lost_by`
/// reached the victim's subscribers.
fn assert_victim_silent_after_its_lease(
    ledger: &Ledger,
    cut_at: i128,
    reset_at: i128,
    lease_lost_by: i128,
) {
    let during_cut: Vec<&Delivery> = ledger
        .deliveries
        .iter()
        .filter(from_victim)
        .filter(|delivery| (cut_at..=reset_at).contains(&delivery.received_at))
        .collect();
    let stale: Vec<&&Delivery> = during_cut
        .iter()
        .filter(|delivery| delivery.fired_at > lease_lost_by)
        .collect();
    let fired_meanwhile = ledger
        .deliveries
        .iter()
        .filter(|delivery| (lease_lost_by..reset_at).contains(&delivery.fired_at))
        .count();
    eprintln!(
        "during the cut: {} deliveries on the victim's streams, {fired_meanwhile} \
         expirations fired by others after its lease was lost",
        during_cut.len()
    );
    assert!(
        stale.is_empty(),
        "the cut-off victim delivered {} expirations fired after it lost its lease \
         ({lease_lost_by}): {stale:?}",
        stale.len()
    );
}
