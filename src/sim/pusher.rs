//! The push sink's pusher, stepped: tickd's subscriber of the namespace [`NAMESPACE`],
//! pushing each delivery to a simulated sink whose answer the seed chooses, and settling
//! it by the real rules.
//!
//! The real [`crate::sink::pusher`] is async (tokio timers, an HTTP client) and cannot be
//! stepped; this drives the same pure rules on the simulation's clock instead: the sink's
//! answers are classified by [`PushOutcome::of_answer`], settled by
//! [`PushOutcome::settlement`], admitted by the real [`Circuit`] ([`Circuit::try_admit`])
//! and [`Pace`] ([`Pace::take_at`]), and handed back through the backend's real `ack`,
//! `retry_later` and `give_back`. What is this file's own is only the loop the async
//! pusher runs: subscribe with its options, admit in arrival order (tokio's semaphore is
//! fair), at most [`MAX_IN_FLIGHT`] pushes at once, claims renewed while waiting.

use std::collections::BTreeMap;
use std::time::Duration;

use tokio::time::Instant;

use super::ledger::{Held, Ledger};
use super::model::Violation;
use super::node::{take_delivery, Later, Node};
use super::rng::Rng;
use crate::domain::{AckOutcome, Delivered, GiveBack, Hold, SubscribeOptions};
use crate::local::delivery::Subscription;
use crate::sink::circuit::{Admission, Circuit};
use crate::sink::outcome::{PushOutcome, Then};
use crate::sink::pace::Pace;
use crate::sink::pusher::{CLAIM_SLACK, HOLD_STEP, RENEW_AHEAD};

mod seen;
mod sink;

use sink::answer;

/// The namespace the pusher takes; no client of the harness subscribes to it, so every
/// delivery of it is the pusher's.
pub(crate) const NAMESPACE: &str = "p";
/// `--sink-max-in-flight`: pushes at once; the subscription's window is twice that.
pub(crate) const MAX_IN_FLIGHT: usize = 2;
/// The push timeout (no connection budget: the simulated sink is always connected or
/// refused at once). A push is answered within it, or is a timeout.
const PUSH_TIMEOUT: u64 = 50_000_000;
/// One in this many expirations is poison: every push of it is answered 500.
const POISON_ONE_IN: u64 = 4;

/// Where a delivery in the pusher's hands is.
#[derive(Debug)]
enum Stage {
    /// Waiting until `until` (a hold), then for the circuit, room and the pace.
    Waiting { until: u64 },
    /// Pushed; the sink's answer is `outcome`, read at `answer_at`.
    Pushing {
        answer_at: u64,
        outcome: PushOutcome,
    },
    /// Delivered and acknowledged; the ack not answered yet.
    Acking,
}

struct InHand {
    delivered: Delivered,
    held: Held,
    stage: Stage,
    admission: Option<Admission>,
    /// Its place among the circuit's fresh waiting ones, while it has one.
    fresh_key: Option<(u64, u64)>,
    /// Pushes of it that met an unreachable sink.
    unreached: u32,
    /// Held after a failure of its own (not the sink's refusal): with the real rules it
    /// is handed back instead, so this is only ever set by a planted bug.
    held_after_own_failure: bool,
    claim_until: u64,
    /// A claim extension is asked and not answered: it waits for it.
    extending: bool,
}

enum Asked {
    Ack {
        later: Later<AckOutcome>,
        held: Vec<Held>,
        sent_at: u64,
    },
    /// Handed back released (`seq` forgotten already) or its claim extended (kept).
    Moved {
        later: Later<bool>,
        held: Held,
        seq: Option<u64>,
        deadline: u64,
    },
    GiveBack {
        later: Later<bool>,
    },
}

/// What the pusher did in a turn, for the harness's trace and checks.
pub(crate) struct Turn {
    pub(crate) acted: bool,
    pub(crate) events: Vec<String>,
}

pub(crate) struct SimPusher {
    subscription: Option<(Subscription, u64)>,
    /// Marked paused: unsent deliveries are given back, the subscription ends once no
    /// push is under way, and none is taken until resumed.
    pub(crate) paused: bool,
    /// A pause was seen while subscribed: that subscription ends (the backend sends it
    /// nothing more once it gave a delivery back), even if resumed meanwhile.
    ending: bool,
    circuit: Circuit,
    pace: Pace,
    /// The instant the simulation's clock origin stands for: the circuit and pace read
    /// only differences of instants, so any fixed origin replays alike.
    origin: Instant,
    origin_nanos: u64,
    in_hand: BTreeMap<u64, InHand>,
    next_seq: u64,
    pushing: usize,
    asked: Vec<Asked>,
    /// The earliest time a waiting delivery looks again (circuit, pace, hold, claim).
    next_look: Option<u64>,
    poison_salt: u64,
}

impl SimPusher {
    pub(crate) fn new(rng: &mut Rng, now: u64) -> Self {
        let origin = Instant::now();
        SimPusher {
            subscription: None,
            paused: false,
            ending: false,
            circuit: Circuit::default(),
            pace: Pace::new_at(None, origin),
            origin,
            origin_nanos: now,
            in_hand: BTreeMap::new(),
            next_seq: 0,
            pushing: 0,
            asked: Vec::new(),
            next_look: None,
            poison_salt: rng.below(u64::MAX),
        }
    }

    /// The process is gone: so is this pusher (its circuit, pace and everything held).
    /// A start makes a new one, as tickd's registry does.
    pub(crate) fn gone(&mut self, ledger: &mut Ledger, rng: &mut Rng, now: u64) {
        // An ack sent and never answered may have been recorded, or not.
        for asked in &self.asked {
            if let Asked::Ack { held, .. } = asked {
                ledger.ack_in_doubt(held);
            }
        }
        let paused = self.paused;
        let salt = self.poison_salt;
        *self = SimPusher::new(rng, now);
        self.paused = paused;
        self.poison_salt = salt;
    }

    fn instant(&self, now: u64) -> Instant {
        self.origin + Duration::from_nanos(now.saturating_sub(self.origin_nanos))
    }

    /// True if every push of the expiration `key` fails: a timer's payload the sink
    /// cannot take, so every firing of the timer (the first of `key`) is poison.
    pub(crate) fn is_poison(&self, key: (u64, u64)) -> bool {
        let mixed = (key.0 ^ self.poison_salt).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        (mixed >> 17).is_multiple_of(POISON_ONE_IN)
    }

    /// The claim a push needs: its timeout, then the slack the real pusher allows.
    fn claim() -> u64 {
        PUSH_TIMEOUT + CLAIM_SLACK.as_nanos() as u64
    }

    pub(crate) fn subscribed(&self) -> bool {
        self.subscription.is_some()
    }

    /// Subscribes as the real pusher does: a window of twice its pushes, acked by hand.
    pub(crate) fn subscribe(&mut self, node: &Node, number: u64) {
        let subscription = node.subscribe(SubscribeOptions {
            namespace: NAMESPACE.to_owned(),
            observer: false,
            ack_timeout: Some(Duration::from_nanos(Self::claim())),
            max_unacked: Some(MAX_IN_FLIGHT * 2),
            auto_ack: false,
        });
        self.subscription = Some((subscription, number));
    }

    /// The ledger's number of the subscription, and its ack timeout.
    pub(crate) fn receipt_of(&self) -> Option<(u64, u64)> {
        self.subscription
            .as_ref()
            .map(|(_, number)| (*number, Self::claim()))
    }

    /// Reads the subscription's stream.
    pub(crate) fn take(&mut self) -> Vec<Delivered> {
        let mut taken = Vec::new();
        if let Some((subscription, _)) = &mut self.subscription {
            while let Some(delivered) = take_delivery(subscription) {
                taken.push(delivered);
            }
        }
        taken
    }

    /// A delivery taken, with what the ledger keeps of it.
    pub(crate) fn holds(&mut self, delivered: Delivered, held: Held, now: u64) {
        self.in_hand.insert(
            self.next_seq,
            InHand {
                delivered,
                held,
                stage: Stage::Waiting { until: now },
                admission: None,
                fresh_key: None,
                unreached: 0,
                held_after_own_failure: false,
                claim_until: now + Self::claim(),
                extending: false,
            },
        );
        self.next_seq += 1;
    }

    /// The next time the pusher has something to do by itself.
    pub(crate) fn next_wakeup(&self, now: u64) -> Option<u64> {
        let answers = self.in_hand.values().filter_map(|hand| match hand.stage {
            Stage::Pushing { answer_at, .. } => Some(answer_at),
            Stage::Waiting { until } if until > now => Some(until),
            _ => None,
        });
        answers.chain(self.next_look).filter(|at| *at > now).min()
    }

    /// Takes in the backend's answers to what the pusher asked.
    pub(crate) fn answers(&mut self, ledger: &mut Ledger, now: u64) -> Result<bool, Violation> {
        let mut any = false;
        let mut waiting = Vec::new();
        for mut asked in std::mem::take(&mut self.asked) {
            let done = match &mut asked {
                Asked::Ack {
                    later,
                    held,
                    sent_at,
                } => match later.poll() {
                    None => false,
                    Some(answer) => {
                        match answer.clone() {
                            Some(outcome) => ledger.acked(held, &outcome, *sent_at, now)?,
                            // Refused (the log failed as it was written): in doubt.
                            None => ledger.ack_in_doubt(held),
                        }
                        let ids: Vec<u64> = held.iter().map(Held::delivery_id).collect();
                        self.in_hand
                            .retain(|_, hand| !ids.contains(&hand.delivered.delivery_id));
                        true
                    }
                },
                Asked::Moved {
                    later,
                    held,
                    seq,
                    deadline,
                } => match later.poll() {
                    None => false,
                    Some(answer) => {
                        let moved = *answer == Some(true);
                        if moved {
                            ledger.claim_moved(held, *deadline);
                        }
                        if let Some(seq) = seq {
                            self.extended(*seq, moved.then_some((held.clone(), *deadline)), now);
                        }
                        true
                    }
                },
                Asked::GiveBack { later } => later.poll().is_some(),
            };
            any |= done;
            if !done {
                waiting.push(asked);
            }
        }
        self.asked = waiting;
        Ok(any)
    }

    /// A claim extension of `seq` was answered: its new claim, or (None) the claim lost,
    /// when the delivery is no longer the pusher's (it comes back from the backend).
    fn extended(&mut self, seq: u64, moved: Option<(Held, u64)>, now: u64) {
        let Some(hand) = self.in_hand.get_mut(&seq) else {
            return;
        };
        hand.extending = false;
        match moved {
            Some((held, deadline)) => {
                hand.claim_until = deadline;
                hand.held = held;
            }
            None => {
                let hand = self.in_hand.remove(&seq).expect("found above");
                self.forget(&hand, now);
            }
        }
    }

    /// A delivery leaves the pusher's hands unpushed: the circuit waits no more for it.
    fn forget(&self, hand: &InHand, now: u64) {
        if let Some(key) = hand.fresh_key {
            self.circuit.stop_waiting(key);
        }
        if hand.admission == Some(Admission::Probe) {
            self.circuit.probe_abandoned_at(self.instant(now));
        }
    }

    /// One turn at `now`: answers read, settlements sent, pushes admitted. True if it
    /// asked the backend anything (the node must run again).
    pub(crate) fn act(
        &mut self,
        node: &Node,
        ledger: &mut Ledger,
        rng: &mut Rng,
        now: u64,
        liveness: bool,
    ) -> Turn {
        let mut turn = Turn {
            acted: false,
            events: Vec::new(),
        };
        let at = self.instant(now);
        self.next_look = None;
        let mut acks = Vec::new();
        let seqs: Vec<u64> = self.in_hand.keys().copied().collect();
        for seq in seqs {
            let hand = self.in_hand.get_mut(&seq).expect("listed above");
            match &hand.stage {
                Stage::Pushing { answer_at, outcome } if *answer_at <= now => {
                    let outcome = outcome.clone();
                    self.pushing -= 1;
                    self.settle(seq, &outcome, node, now, &mut acks, &mut turn);
                }
                Stage::Waiting { until }
                    if *until <= now && !hand.extending && !self.paused && !self.ending =>
                {
                    self.admit(seq, node, ledger, rng, now, at, liveness, &mut turn);
                }
                _ => {}
            }
        }
        if !acks.is_empty() {
            // One Ack for every push delivered this turn, as the real pusher batches them.
            let ids = acks.iter().map(Held::delivery_id).collect();
            self.asked.push(Asked::Ack {
                later: node.ack(NAMESPACE.to_owned(), ids),
                held: acks,
                sent_at: now,
            });
            turn.acted = true;
        }
        if self.paused || self.ending {
            turn.acted |= self.leave(node, ledger, now, &mut turn);
        }
        turn
    }

    /// Settles the push of `seq` by the sink's answer, by the real rules.
    #[allow(clippy::too_many_arguments)]
    fn settle(
        &mut self,
        seq: u64,
        outcome: &PushOutcome,
        node: &Node,
        now: u64,
        acks: &mut Vec<Held>,
        turn: &mut Turn,
    ) {
        let at = self.instant(now);
        let hand = self.in_hand.get_mut(&seq).expect("settled in hand");
        if let PushOutcome::SlowDown { after } = outcome {
            self.pace.slow_down_at(*after, at);
        }
        let delivered = &hand.delivered;
        let judged = self.circuit.judge(delivered, hand.unreached > 0);
        let settlement =
            outcome.settlement(delivered.attempt, delivered.delivery_id, hand.unreached);
        let admission = hand.admission.take().unwrap_or(Admission::Push);
        if settlement.sink_answered {
            self.circuit.sink_answered(judged);
        } else {
            self.circuit.sink_failed_at(admission, judged, at);
        }
        turn.events.push(format!(
            "push {:x} attempt {} -> {outcome:?} {:?}",
            delivered.delivery_id, delivered.attempt, settlement.then
        ));
        match settlement.then {
            Then::Ack => {
                hand.stage = Stage::Acking;
                acks.push(hand.held.clone());
            }
            Then::RetryLater { after } => {
                let hand = self.in_hand.remove(&seq).expect("settled in hand");
                let after_nanos = after.as_nanos() as u64;
                self.asked.push(Asked::Moved {
                    later: node.retry_later(
                        NAMESPACE.to_owned(),
                        hand.delivered.delivery_id,
                        after,
                        Hold::Released,
                    ),
                    held: hand.held,
                    seq: None,
                    deadline: now + after_nanos,
                });
                turn.acted = true;
            }
            Then::PushAgain => hand.stage = Stage::Waiting { until: now },
            Then::Hold { wait } => {
                hand.unreached += 1;
                hand.held_after_own_failure = !matches!(outcome, PushOutcome::Unreachable { .. });
                let wait = wait.as_nanos() as u64;
                hand.stage = Stage::Waiting { until: now + wait };
                self.extend(seq, node, now, wait + HOLD_STEP.as_nanos() as u64);
                turn.acted = true;
            }
        }
    }

    /// Asks for the claim of `seq` to end `by` from now (kept).
    fn extend(&mut self, seq: u64, node: &Node, now: u64, by: u64) {
        let hand = self.in_hand.get_mut(&seq).expect("extended in hand");
        hand.extending = true;
        self.asked.push(Asked::Moved {
            later: node.retry_later(
                NAMESPACE.to_owned(),
                hand.delivered.delivery_id,
                Duration::from_nanos(by),
                Hold::Kept,
            ),
            held: hand.held.clone(),
            seq: Some(seq),
            deadline: now + by,
        });
    }

    /// The circuit's word, then room, then the pace; then the push, answered as the
    /// simulated sink chooses.
    #[allow(clippy::too_many_arguments)]
    fn admit(
        &mut self,
        seq: u64,
        node: &Node,
        ledger: &mut Ledger,
        rng: &mut Rng,
        now: u64,
        at: Instant,
        liveness: bool,
        turn: &mut Turn,
    ) {
        let renew_by = PUSH_TIMEOUT + (CLAIM_SLACK / 4 + RENEW_AHEAD).as_nanos() as u64;
        let hand = self.in_hand.get_mut(&seq).expect("admitted in hand");
        if hand.claim_until < now + renew_by {
            // The claim must outlive the push and its ack.
            let by = HOLD_STEP.as_nanos() as u64 + Self::claim();
            self.extend(seq, node, now, by);
            turn.acted = true;
            return;
        }
        let judged = self.circuit.judge(&hand.delivered, hand.unreached > 0);
        if hand.admission.is_none() && judged.failed_before() {
            match self.circuit.admit_failed_now(judged, at) {
                Ok(admission) => hand.admission = Some(admission),
                Err(wait) => {
                    // It waits out the open circuit in the backend, unspent.
                    let mut hand = self.in_hand.remove(&seq).expect("admitted in hand");
                    // It may have waited as fresh before its timer was known to fail.
                    self.forget(&hand, now);
                    let again_at = now + wait.as_nanos() as u64;
                    ledger.given_back(&mut hand.held, now, again_at);
                    turn.events.push(format!(
                        "give back {:x} for {wait:?} (circuit)",
                        hand.delivered.delivery_id
                    ));
                    self.asked.push(Asked::GiveBack {
                        later: node.give_back(
                            NAMESPACE.to_owned(),
                            hand.delivered.delivery_id,
                            GiveBack::After(wait),
                        ),
                    });
                    turn.acted = true;
                    return;
                }
            }
        }
        if hand.admission.is_none() {
            if hand.fresh_key.is_none() && self.circuit.gauge_value() != 0 {
                hand.fresh_key = self.circuit.start_waiting(judged);
            }
            match self.circuit.try_admit(judged, at) {
                Ok(admission) => {
                    hand.admission = Some(admission);
                    if let Some(key) = hand.fresh_key.take() {
                        self.circuit.stop_waiting(key);
                    }
                }
                Err(until) => {
                    let until = until.map(|until| now + (until - at).as_nanos() as u64);
                    self.look_again(until);
                    return;
                }
            }
        }
        if self.pushing >= MAX_IN_FLIGHT {
            return;
        }
        if let Some(wait) = self.pace.take_at(at) {
            self.look_again(Some(now + wait.as_nanos().max(1) as u64));
            return;
        }
        let key = (
            hand.delivered.expiration.id.0,
            hand.delivered.expiration.fired_count,
        );
        let poison = self.is_poison(key);
        let hand = self.in_hand.get_mut(&seq).expect("admitted in hand");
        let (outcome, took) = answer(rng, poison, liveness);
        hand.stage = Stage::Pushing {
            answer_at: now + took,
            outcome,
        };
        self.pushing += 1;
    }

    fn look_again(&mut self, at: Option<u64>) {
        if let Some(at) = at {
            self.next_look = Some(self.next_look.map_or(at, |look| look.min(at)));
        }
    }

    /// Paused: what is not being pushed is given back unsent, its attempt refunded; once
    /// no push is under way and every ack is answered, the subscription ends. True if it
    /// asked anything.
    fn leave(&mut self, node: &Node, ledger: &mut Ledger, now: u64, turn: &mut Turn) -> bool {
        let max_attempts = super::harness::MAX_ATTEMPTS;
        self.ending = self.subscription.is_some();
        let unsent: Vec<u64> = self
            .in_hand
            .iter()
            .filter(|(_, hand)| matches!(hand.stage, Stage::Waiting { .. }))
            .map(|(seq, _)| *seq)
            .collect();
        let asked = !unsent.is_empty();
        for seq in unsent {
            let mut hand = self.in_hand.remove(&seq).expect("listed above");
            self.forget(&hand, now);
            ledger.given_back(&mut hand.held, now, now);
            turn.events
                .push(format!("give back {:x}", hand.delivered.delivery_id));
            self.asked.push(Asked::GiveBack {
                later: node.give_back(
                    NAMESPACE.to_owned(),
                    hand.delivered.delivery_id,
                    GiveBack::Leaving,
                ),
            });
        }
        if self.in_hand.is_empty() && self.asked.is_empty() {
            if let Some((subscription, number)) = self.subscription.take() {
                ledger.unsubscribed(number, now, false, max_attempts);
                turn.events.push(format!("pusher unsubscribed {number}"));
                drop(subscription);
                self.ending = false;
            }
        }
        asked
    }
}
