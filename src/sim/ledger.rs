//! The delivery ledger: every delivery the clients received and every ack answer, checked
//! against delivery's promises:
//! - an expiration comes again only after its ack timeout, its subscriber's loss, or a
//!   restart, and never after an ack of it was answered;
//! - attempts rise with each delivery and never pass the maximum; across a power cut they
//!   may repeat the last (`--sync always`: its record is synced with the next commit), or,
//!   with `--sync interval`, fall back to the last made before the cut's window (see
//!   [`Ledger::crashed`]), never further;
//! - an ack settles exactly the deliveries it names that await one: one from an earlier
//!   process, or one already taken back, is unknown, and settles nothing else;
//! - a Redrive takes back only dead expirations (attempts used up, not settled); one it
//!   took back comes again at attempt 1 and, when the answer says exactly which were
//!   taken, must come again.

use std::collections::BTreeMap;

mod pusher;

use super::model::Violation;
use super::rng::Rng;
use crate::domain::{AckOutcome, Delivered};

/// The ack deadlines' wheel may take back a delivery up to a tick after its deadline.
const ACK_DEADLINE_SLACK: u64 = 2_000_000;

/// When and by whom a delivery was received.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Receipt {
    pub(crate) subscription: u64,
    pub(crate) ack_timeout: u64,
    pub(crate) at: u64,
}

/// One delivery a client holds and may ack.
#[derive(Clone, Debug)]
pub(crate) struct Held {
    namespace: String,
    delivery_id: u64,
    boot: u64,
    firing: (u64, u64),
    receipt: Receipt,
}

/// The latest delivery of one firing.
#[derive(Clone, Copy, Debug)]
struct Latest {
    delivery_id: u64,
    attempt: u32,
    boot: u64,
    receipt: Receipt,
}

#[derive(Default)]
struct Firing {
    latest: Option<Latest>,
    /// When an ack of it was sent, and when that ack was answered.
    settled_at: Option<u64>,
    settle_answered_at: u64,
    /// A power cut may have taken its settlement, or not: it may come again, and need not.
    maybe_settled: bool,
    /// After a power cut since its latest delivery: the attempt whose record the cut could
    /// not take; the next delivery is a later one.
    crash_floor: Option<u32>,
    /// Its deliveries since its attempts last counted from 1, with when each was received.
    attempts: Vec<(u32, u64)>,
    /// Processes ended since its latest delivery: each may have recorded an attempt that
    /// never reached a client (the log records an attempt before the delivery leaves),
    /// and a start buries it once those reach the maximum.
    ends_since: u32,
    /// Its namespace (set with its first delivery).
    namespace: Option<Box<str>>,
    /// When a Redrive of its namespace was answered while it was dead (`u64::MAX`: sent,
    /// not answered): its next delivery may be attempt 1.
    redriven: Option<u64>,
    /// The Redrive's answer counted exactly the dead expirations, so this one was taken
    /// back: it must be delivered again.
    owed_redelivery: bool,
}

/// The firings a Redrive may take back (see [`Ledger::redrive_sent`]).
pub(crate) struct RedriveCandidates {
    dead: Vec<(u64, u64)>,
    /// How many of them tickd has surely found dead too (their ack timeout well past).
    surely_dead: usize,
}

pub(crate) struct Ledger {
    boot: u64,
    subscriptions: u64,
    /// Subscriptions ended, with when.
    ended: BTreeMap<u64, u64>,
    firings: BTreeMap<(u64, u64), Firing>,
    held: Vec<Held>,
    /// Firings whose subscriber just went while another could take them: they must be
    /// delivered again within the step.
    orphaned: Vec<((u64, u64), u64)>,
    /// Set once damage was injected at rest: a refusal to start is then expected.
    pub(crate) damaged_at_rest: bool,
}

impl Ledger {
    pub(crate) fn new() -> Self {
        Self {
            boot: 0,
            subscriptions: 0,
            ended: BTreeMap::new(),
            firings: BTreeMap::new(),
            held: Vec::new(),
            orphaned: Vec::new(),
            damaged_at_rest: false,
        }
    }

    pub(crate) fn restarted(&mut self) {
        self.boot += 1;
    }

    pub(crate) fn subscribed(&mut self) -> u64 {
        self.subscriptions += 1;
        self.subscriptions
    }

    /// A subscription ended; with `another` of its namespace still there, what it held
    /// unsettled must go to that one at once.
    pub(crate) fn unsubscribed(&mut self, number: u64, now: u64, another: bool, max_attempts: u32) {
        self.ended.insert(number, now);
        if !another {
            return;
        }
        for (firing, state) in &self.firings {
            let Some(latest) = state.latest else { continue };
            let in_flight = now < latest.receipt.at + latest.receipt.ack_timeout;
            if latest.receipt.subscription == number
                && latest.boot == self.boot
                && state.settled_at.is_none()
                && in_flight
                && latest.attempt < max_attempts
            {
                self.orphaned.push((*firing, latest.delivery_id));
            }
        }
    }

    /// After the step of an unsubscription: each orphan came again.
    pub(crate) fn check_orphans(&mut self) -> Result<(), Violation> {
        for (firing, old) in std::mem::take(&mut self.orphaned) {
            let latest = self.firings[&firing].latest.expect("was delivered");
            if latest.delivery_id == old {
                return Err(Violation(format!(
                    "{:016x}/{}: its subscriber went away, another could take it, and it was not delivered again",
                    firing.0, firing.1
                )));
            }
        }
        Ok(())
    }

    /// The process is gone (its subscriptions with it). `power_cut`: the machine lost
    /// power too, `Some(lost_from)` with `--sync interval`, whose records written since
    /// `lost_from` (the last sync interval) the cut may take, `None` with `--sync always`,
    /// where only the deliveries' own attempt records, synced with the next commit, can go.
    pub(crate) fn crashed(&mut self, power_cut: Option<Option<u64>>) {
        self.orphaned.clear();
        for firing in self.firings.values_mut() {
            firing.ends_since += 1;
        }
        let Some(lost_from) = power_cut else { return };
        for firing in self.firings.values_mut() {
            let Some(latest) = firing.latest else {
                continue;
            };
            let floor = match lost_from {
                None => latest.attempt.saturating_sub(1),
                Some(lost_from) => {
                    // What the log kept is the last record before `lost_from` (a refund
                    // follows the attempt it refunds), or any made since, which the cut
                    // may or may not take: the lowest of them. Those made since may be
                    // gone for good: a later cut's floor cannot rest on them.
                    let kept = firing
                        .attempts
                        .iter()
                        .rfind(|(_, at)| *at < lost_from)
                        .map_or(0, |(attempt, _)| *attempt);
                    let since = firing
                        .attempts
                        .iter()
                        .filter(|(_, at)| *at >= lost_from)
                        .map(|(attempt, _)| *attempt)
                        .min();
                    firing.attempts.retain(|(_, at)| *at < lost_from);
                    since.map_or(kept, |since| since.min(kept))
                }
            };
            firing.crash_floor = Some(firing.crash_floor.map_or(floor, |old| old.min(floor)));
            let Some(lost_from) = lost_from else { continue };
            if firing.settled_at.is_some() && firing.settle_answered_at >= lost_from {
                // Its settlement may be gone: it may come again after the restart.
                firing.settled_at = None;
                firing.maybe_settled = true;
            }
            if firing.redriven.is_some_and(|at| at >= lost_from) {
                // The Redrive's record may be gone: it may be dead again, or come again.
                firing.owed_redelivery = false;
            }
        }
    }

    /// A client received `delivered`: checks it may come now, with this attempt. What it
    /// holds to ack, kept among those the harness's clients may ack when `by_a_client`
    /// (the pusher keeps its own).
    pub(crate) fn received(
        &mut self,
        receipt: Receipt,
        delivered: &Delivered,
        max_attempts: u32,
        by_a_client: bool,
    ) -> Result<Held, Violation> {
        let expiration = &delivered.expiration;
        let key = (expiration.id.0, expiration.fired_count);
        // Named only in a violation: formatting on every delivery is most of a step's cost.
        let name = || format!("{:016x}/{}", key.0, key.1);
        if delivered.attempt == 0 || delivered.attempt > max_attempts {
            return Err(Violation(format!(
                "{} delivered as attempt {} (the maximum is {max_attempts})",
                name(),
                delivered.attempt
            )));
        }
        let firing = self.firings.entry(key).or_default();
        if firing.namespace.as_deref() != Some(&*expiration.namespace) {
            firing.namespace = Some(Box::from(&*expiration.namespace));
        }
        if firing.redriven.take().is_some() {
            // Taken back by the Redrive: its attempts count afresh, from 1 (more, by one
            // per process ended since: each may have recorded an attempt no client got).
            // Any other attempt is judged as if there had been no Redrive.
            if delivered.attempt <= 1 + firing.ends_since {
                firing.owed_redelivery = false;
                firing.latest = None;
                firing.crash_floor = None;
                firing.attempts.clear();
            } else if firing.owed_redelivery {
                return Err(Violation(format!(
                    "{} came back as attempt {} after a Redrive (attempts count afresh from 1; {} processes ended since)",
                    name(),
                    delivered.attempt,
                    firing.ends_since
                )));
            }
        }
        if let Some(settled_at) = firing.settled_at {
            return Err(Violation(format!(
                "{} delivered again (attempt {}) after an ack of it was answered at {settled_at}",
                name(),
                delivered.attempt
            )));
        }
        if let Some(latest) = firing.latest {
            let restarted = latest.boot != self.boot;
            if !restarted {
                let timed_out = receipt.at >= latest.receipt.at + latest.receipt.ack_timeout;
                let lost = self.ended.contains_key(&latest.receipt.subscription);
                if !timed_out && !lost {
                    return Err(Violation(format!(
                        "{} delivered again {} ns after attempt {}, before its ack timeout of {} ns, its subscriber still there",
                        name(),
                        receipt.at - latest.receipt.at, latest.attempt, latest.receipt.ack_timeout
                    )));
                }
            }
            let lowest = firing
                .crash_floor
                .map_or(latest.attempt + 1, |floor| floor + 1);
            if delivered.attempt < lowest {
                return Err(Violation(format!(
                    "{} delivered as attempt {} after attempt {}",
                    name(),
                    delivered.attempt,
                    latest.attempt
                )));
            }
        }
        firing.latest = Some(Latest {
            delivery_id: delivered.delivery_id,
            attempt: delivered.attempt,
            boot: self.boot,
            receipt,
        });
        firing.crash_floor = None;
        firing.ends_since = 0;
        firing.maybe_settled = false;
        firing.attempts.push((delivered.attempt, receipt.at));
        let held = Held {
            namespace: expiration.namespace.to_string(),
            delivery_id: delivered.delivery_id,
            boot: self.boot,
            firing: key,
            receipt,
        };
        if by_a_client {
            self.held.push(held.clone());
        }
        Ok(held)
    }

    /// A Redrive of every dead expiration of `namespace` sent at `sent_at`: the firings
    /// it may take back. Dead, as far as a client can tell: its last attempt was the
    /// maximum, unsettled, and either its ack timeout passed, its subscriber went or an
    /// earlier process delivered it (a start makes those dead again). Each may come again
    /// at attempt 1 from now on (even before the answer: the task redelivers at once).
    pub(crate) fn redrive_sent(
        &mut self,
        namespace: &str,
        sent_at: u64,
        max_attempts: u32,
    ) -> RedriveCandidates {
        let mut candidates = RedriveCandidates {
            dead: Vec::new(),
            surely_dead: 0,
        };
        for (key, firing) in &mut self.firings {
            let Some(latest) = firing.latest else {
                continue;
            };
            // Attempts it may have used, counting one unseen per process ended since.
            let attempts = latest.attempt.saturating_add(firing.ends_since);
            if firing.namespace.as_deref() != Some(namespace)
                || firing.settled_at.is_some()
                || attempts < max_attempts
            {
                continue;
            }
            let deadline = latest.receipt.at + latest.receipt.ack_timeout;
            let lost = self.ended.contains_key(&latest.receipt.subscription);
            let earlier_boot = latest.boot != self.boot;
            if sent_at >= deadline || lost || earlier_boot {
                candidates.dead.push(*key);
                let certain = (sent_at >= deadline + ACK_DEADLINE_SLACK || lost || earlier_boot)
                    && latest.attempt == max_attempts
                    && firing.crash_floor.is_none();
                candidates.surely_dead += usize::from(certain);
                firing.redriven = Some(u64::MAX);
            }
        }
        candidates
    }

    /// The Redrive sent with `candidates` was answered at `answered_at`: it took back
    /// `redriven`. It cannot count more than were dead; when it counts all of them (none
    /// still awaiting tickd's own timeout), each must come again.
    pub(crate) fn redrive_answered(
        &mut self,
        candidates: &RedriveCandidates,
        redriven: u32,
        answered_at: u64,
    ) -> Result<(), Violation> {
        // Expirations no client ever received may have died too, one unseen attempt per
        // process ended: the count is bounded only while no process has ended.
        if redriven as usize > candidates.dead.len() && self.boot == 1 {
            return Err(Violation(format!(
                "a Redrive took back {redriven}, but at most {} of its namespace's expirations were dead",
                candidates.dead.len()
            )));
        }
        let exact = redriven as usize == candidates.dead.len()
            && candidates.surely_dead == candidates.dead.len();
        for key in &candidates.dead {
            let firing = self
                .firings
                .get_mut(key)
                .expect("a candidate was delivered");
            // Those already delivered again owe nothing more.
            if firing.redriven.is_some() {
                firing.redriven = Some(answered_at);
                firing.owed_redelivery |= exact;
            }
        }
        Ok(())
    }

    /// Timer `id` was lost to a power cut and its id given to a new timer: the lost one's
    /// deliveries are forgotten (none of them can be settled or delivered again now).
    pub(crate) fn forget_timer(&mut self, id: u64) {
        let keys: Vec<(u64, u64)> = self
            .firings
            .range((id, 0)..=(id, u64::MAX))
            .map(|(key, _)| *key)
            .collect();
        for key in keys {
            self.firings.remove(&key);
        }
        self.held.retain(|held| held.firing.0 != id);
    }

    /// True while an expiration a Redrive took back has not come again.
    pub(crate) fn owes_a_redelivery(&self) -> bool {
        self.firings.values().any(|firing| firing.owed_redelivery)
    }

    /// Up to `count` deliveries of one namespace for a client to ack (any boot's).
    pub(crate) fn pick_to_ack(&mut self, rng: &mut Rng, count: usize) -> Option<Vec<Held>> {
        if self.held.is_empty() {
            return None;
        }
        let first = self.held.remove(rng.below_usize(self.held.len()));
        let mut picked = vec![first];
        while picked.len() < count {
            let same: Vec<usize> = (0..self.held.len())
                .filter(|&index| self.held[index].namespace == picked[0].namespace)
                .collect();
            if same.is_empty() {
                break;
            }
            picked.push(self.held.remove(same[rng.below_usize(same.len())]));
        }
        Some(picked)
    }

    /// The namespace and ids of deliveries picked to ack.
    pub(crate) fn ids(held: &[Held]) -> (String, Vec<u64>) {
        let ids = held.iter().map(|held| held.delivery_id).collect();
        (held[0].namespace.clone(), ids)
    }

    /// An ack sent at `sent_at` was answered `outcome` at `answered_at`.
    pub(crate) fn acked(
        &mut self,
        held: &[Held],
        outcome: &AckOutcome,
        sent_at: u64,
        answered_at: u64,
    ) -> Result<(), Violation> {
        let mut acknowledged = 0;
        for delivery in held {
            let firing = self.firings.entry(delivery.firing).or_default();
            let latest = firing.latest.expect("a held delivery was received");
            let current = delivery.boot == self.boot
                && latest.delivery_id == delivery.delivery_id
                && latest.boot == delivery.boot
                && firing.settled_at.is_none()
                && !self.ended.contains_key(&delivery.receipt.subscription);
            let deadline = delivery.receipt.at + delivery.receipt.ack_timeout;
            let unknown = outcome.unknown.contains(&delivery.delivery_id);
            let name = || {
                format!(
                    "delivery {:x} of {:016x}/{}",
                    delivery.delivery_id, delivery.firing.0, delivery.firing.1
                )
            };
            if !unknown {
                if !current || sent_at >= deadline + ACK_DEADLINE_SLACK {
                    return Err(Violation(format!(
                        "an ack of {} (boot {}, now {}) settled something, but it was not awaiting one",
                        name(),
                        delivery.boot, self.boot
                    )));
                }
                acknowledged += 1;
                firing.settled_at = Some(sent_at);
                firing.settle_answered_at = answered_at;
            } else if current && sent_at < deadline {
                return Err(Violation(format!(
                    "an ack of {}, awaiting one, was answered unknown",
                    name()
                )));
            }
        }
        if acknowledged != outcome.acknowledged as usize {
            return Err(Violation(format!(
                "an ack counted {} settled where {acknowledged} of its ids were",
                outcome.acknowledged
            )));
        }
        Ok(())
    }
}
