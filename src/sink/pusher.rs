//! One sink's pusher: tickd's own subscriber of the sink's namespace. It takes deliveries
//! from the backend like any Subscribe stream (so a push sink has a stream's guarantees:
//! attempts counted across restarts, the dead list, Redrive, buffering within the
//! namespace's limits), POSTs each, and settles it by the sink's answer:
//!
//! - delivered: acknowledged;
//! - asked again (408, 429, 5xx, no answer in time) or rejected (other answers): handed
//!   back with [`Expirations::retry_later`] after its `Retry-After` or its back-off, when
//!   the backend delivers it again as the next attempt, or buries it once out of attempts;
//! - unreachable: not an attempt. The pusher keeps the delivery, extending its claim, and
//!   pushes it again after a back-off, so a sink that is down for a while loses nothing
//!   and burns no attempts.
//!
//! Two bounds: at most `--sink-max-in-flight` pushes at once (`room`: a place is taken
//! for one push and given up as it is answered), and a subscription window twice that, so
//! that deliveries pushed and awaiting their (batched, durable) ack, or waiting for room,
//! never stall the pushes. A delivery handed back for a retry leaves the window too
//! ([`Hold::Released`]), and so does one that failed before and meets an open circuit,
//! given back unspent to wait in the backend ([`GiveBack::After`]): expirations that keep
//! failing never keep the others from their pushes, nor from probing the circuit. A sink
//! that is down holds at most the window while the rest wait in the backend.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use futures_util::stream::FuturesUnordered;
use futures_util::FutureExt;

use tokio::sync::{mpsc, watch, Notify, Semaphore, SemaphorePermit};
use tokio::time::Instant;
use tokio_stream::StreamExt;
use tracing::{debug, error, info, warn};

use super::circuit::{Admission, Circuit, Judged};
use super::client::SinkClient;
use super::outcome::{PushOutcome, Then};
use super::pace::Pace;
use super::signing::Signing;
use crate::domain::{Delivered, Expirations, GiveBack, Hold, SubscribeOptions};
use crate::metrics::sinks::SinkSeries;
use crate::telemetry::spans;
use prometheus_client::metrics::gauge::Gauge;

mod acks;
mod leaving;

use acks::acknowledge_in_batches;
use leaving::{finish, finish_pushes, paused_is, stopped, Leaving};

/// Beyond the push timeout, how long a delivery's claim lasts: time to read the answer
/// and acknowledge it before the backend would hand it to another attempt.
pub(crate) const CLAIM_SLACK: Duration = Duration::from_secs(5);
/// While a push waits (for the circuit, or after an unreachable sink), its claim is
/// extended by this much at a time.
pub(crate) const HOLD_STEP: Duration = Duration::from_secs(30);
/// How long a stopping pusher lets the pushes in flight finish before it drops them
/// (unacknowledged, they come back after a restart).
const STOP_GRACE: Duration = Duration::from_secs(2);
/// Delivery ids acknowledged in one Ack at most, and Ack calls in flight per sink.
const ACK_BATCH: usize = 1_000;
const ACKS_IN_FLIGHT: usize = 4;
/// A waiting delivery's claim is renewed this long before it would be too short to push.
pub(crate) const RENEW_AHEAD: Duration = Duration::from_secs(1);
/// How long a pusher waits to ask again when extending a claim failed.
const EXTEND_AGAIN_AFTER: Duration = Duration::from_millis(500);
/// How long a pusher waits to subscribe again when the backend refused or ended its
/// subscription (it is starting, or a replica lost its database for a moment).
const RESUBSCRIBE_AFTER: Duration = Duration::from_secs(1);

pub(crate) struct Pusher {
    pub(crate) namespace: String,
    pub(crate) sink: SinkClient,
    pub(crate) shown_as: String,
    pub(crate) expirations: Arc<dyn Expirations>,
    pub(crate) circuit: Circuit,
    pub(crate) timeout: Duration,
    pub(crate) max_in_flight: usize,
    pub(crate) series: SinkSeries,
    /// `max_in_flight` permits: one per push under way.
    pub(crate) room: Semaphore,
    /// The namespace's secrets (`--sink-secret-file`): each push is signed with them.
    pub(crate) signing: Option<Arc<Signing>>,
    /// True while the sink is paused (PauseSink): the pusher lets the pushes under way end
    /// and holds no subscription, so no expiration leaves the backend for it.
    pub(crate) paused: watch::Sender<bool>,
    /// True while the pusher holds a subscription: what a pause waits to see false.
    pub(crate) pulling: watch::Sender<bool>,
    /// How fast pushes may leave: the rate set, and the sink's own slow-downs.
    pub(crate) pace: Pace,
    /// What the last push that did not deliver met (for `SinkStatus`).
    pub(crate) last_error: std::sync::Mutex<Option<String>>,
}

impl Pusher {
    /// Waits until the pusher holds no subscription (a pause marked: the pushes under
    /// way ended, the rest handed back), or until the pause is lifted meanwhile, at most
    /// as long as a push and its ack may take.
    pub(crate) async fn until_not_pulling(&self) {
        let mut pulling = self.pulling.subscribe();
        let mut paused = self.paused.subscribe();
        let ended = self.push_budget() + CLAIM_SLACK + STOP_GRACE;
        let settled = async {
            tokio::select! {
                _ = pulling.wait_for(|pulling| !*pulling) => {}
                () = paused_is(&mut paused, false) => {}
            }
        };
        if tokio::time::timeout(ended, settled).await.is_err() {
            warn!(namespace = %self.namespace, "a paused sink's pushes did not end in time; they come back when their claims end");
        }
        // What the pusher held unsent was given back unspent (and a subscription it made
        // just before the pause, dropped with it): the pause is answered once that is kept
        // across a crash, waited for as long as a push may take.
        let recorded = tokio::time::timeout(self.push_budget(), self.expirations.recorded());
        match recorded.await {
            Ok(Ok(())) => {}
            Ok(Err(error)) => {
                debug!(namespace = %self.namespace, %error, "a paused sink's hand-backs were not confirmed")
            }
            Err(_) => {
                warn!(namespace = %self.namespace, "a paused sink's hand-backs were not confirmed in time")
            }
        }
    }

    /// Pauses or resumes the sink without waiting for the pushes under way (the follower
    /// of a shared store applies another replica's change so). True if it changed.
    pub(crate) fn mark_paused(&self, paused: bool) -> bool {
        self.paused.send_replace(paused) != paused
    }

    pub(crate) fn is_paused(&self) -> bool {
        *self.paused.borrow()
    }

    /// The longest one push takes: its connection, then the answer.
    fn push_budget(&self) -> Duration {
        self.timeout + self.sink.connect_budget()
    }

    fn subscription(&self) -> SubscribeOptions {
        SubscribeOptions {
            namespace: self.namespace.clone(),
            observer: false,
            ack_timeout: Some(self.push_budget() + CLAIM_SLACK),
            max_unacked: Some(self.max_in_flight.saturating_mul(2)),
            auto_ack: false,
        }
    }

    /// Pushes until `stop` says true.
    pub(crate) async fn run(self: Arc<Self>, mut stop: watch::Receiver<bool>) {
        // Driven here rather than spawned, a task each: a push is mostly waiting, and one
        // task polling those woken costs less than a task's start, wake-ups and end each.
        let mut pushes = FuturesUnordered::new();
        let (acks, delivered_ids) = mpsc::unbounded_channel();
        let acker = tokio::spawn(acknowledge_in_batches(
            self.expirations.clone(),
            self.namespace.clone(),
            delivered_ids,
        ));
        info!(namespace = %self.namespace, sink = %self.shown_as, "pushing expirations to a sink");
        let mut paused = self.paused.subscribe();
        loop {
            // Pulling is said before the pause is read: a pause marked after this read
            // sees it, and waits for this subscription to end.
            self.pulling.send_replace(true);
            let is_paused = *paused.borrow_and_update();
            if is_paused {
                self.pulling.send_replace(false);
                tokio::select! {
                    () = stopped(&mut stop) => return finish(pushes, acks, acker).await,
                    () = paused_is(&mut paused, false) => {}
                }
                info!(namespace = %self.namespace, "a sink resumed: pushing");
                continue;
            }
            match self.expirations.subscribe(self.subscription()) {
                Ok(mut deliveries) => {
                    // Set once a push gave a delivery back for a pause: the backend sends
                    // this subscription nothing more, so it ends even if the pause was
                    // lifted before this loop saw it.
                    let given_back_for_a_pause = Arc::new(Notify::new());
                    let for_a_pause = loop {
                        tokio::select! {
                            // Stop and pause first: a pause marked while this subscribed
                            // (PauseSink saw no subscription, and answered) is seen here
                            // before any delivery is taken.
                            biased;
                            () = stopped(&mut stop) => {
                                drop(deliveries);
                                self.pulling.send_replace(false);
                                return finish(pushes, acks, acker).await;
                            }
                            () = paused_is(&mut paused, true) => break true,
                            () = given_back_for_a_pause.notified() => break true,
                            Some(ended) = pushes.next(), if !pushes.is_empty() => {
                                // A push that panicked is one delivery's loss of a moment
                                // (its claim ends and it comes back), not the sink's.
                                if Result::is_err(&ended) {
                                    error!(namespace = %self.namespace, "a push panicked; its expiration is delivered again when its claim ends");
                                }
                            }
                            next = deliveries.next() => match next {
                                Some(delivered) => {
                                    let leaving = Leaving {
                                        paused: paused.clone(),
                                        stop: stop.clone(),
                                        given_back: given_back_for_a_pause.clone(),
                                    };
                                    let push = self.clone().deliver(delivered, acks.clone(), leaving);
                                    pushes.push(AssertUnwindSafe(push).catch_unwind());
                                }
                                // The backend ended the subscription (it is stopping, or a
                                // replica lost its partition): what it gave comes back as
                                // redeliveries, which pushes still held here would race.
                                None => break false,
                            },
                        }
                    };
                    // Those under way may finish (a pause waits for any push already
                    // sent); the rest come back from the backend.
                    let grace = if for_a_pause {
                        self.push_budget() + CLAIM_SLACK
                    } else {
                        STOP_GRACE
                    };
                    finish_pushes(&mut pushes, grace).await;
                    drop(deliveries);
                    self.pulling.send_replace(false);
                    // No push is left: a probe among those dropped never answered, and
                    // the circuit must not wait for it.
                    self.circuit.probe_abandoned();
                    if for_a_pause {
                        info!(namespace = %self.namespace, "a sink is paused: no push leaves until it is resumed");
                        continue;
                    }
                }
                Err(error) => {
                    self.pulling.send_replace(false);
                    warn!(namespace = %self.namespace, %error, "a sink could not subscribe; trying again");
                }
            }
            tokio::select! {
                () = stopped(&mut stop) => return finish(pushes, acks, acker).await,
                () = tokio::time::sleep(RESUBSCRIBE_AFTER) => {}
            }
        }
    }

    /// Pushes one delivery until the sink answers, then settles it by the answer. Until
    /// it is sent, a pause or a stop (`leaving`) gives it back unspent (see
    /// [`Expirations::give_back`]): a delivery that never left costs no attempt.
    async fn deliver(
        self: Arc<Self>,
        delivered: Delivered,
        acks: mpsc::UnboundedSender<u64>,
        mut leaving: Leaving,
    ) {
        // The backend stamped the claim when it claimed the delivery, a little before it
        // arrived here (a replica's claim statement may take a while to answer): count
        // half the slack as spent already, so the claim is never thought longer than it is.
        let mut claim_until = Instant::now() + self.push_budget() + CLAIM_SLACK / 2;
        let mut unreached = 0;
        // Pushes of this attempt so far: a slowed or unreachable sink is pushed the same
        // attempt again, and its spans say which try each was.
        let mut tries = 0;
        loop {
            let judged = self.circuit.judge(&delivered, unreached > 0);
            // One that failed before waits out an open circuit in the backend, its place
            // here for one that may probe (see `circuit`).
            let mut admission = None;
            if judged.failed_before() {
                match self.circuit.admit_failed_now(judged, Instant::now()) {
                    Ok(admitted) => admission = Some(admitted),
                    Err(wait) => {
                        debug!(namespace = %self.namespace, ?wait, "a failed expiration waits out the open circuit in the backend");
                        return self
                            .give_back_unsent(&delivered, GiveBack::After(wait))
                            .await;
                    }
                }
            }
            let admitted = tokio::select! {
                biased;
                () = leaving.now() => return self.leave_unsent(&delivered, &leaving).await,
                admitted = self.admitted(&delivered, judged, admission, &mut claim_until) => admitted,
            };
            let Some((admission, room)) = admitted else {
                return;
            };
            if leaving.is_now() {
                drop(room);
                return self.leave_unsent(&delivered, &leaving).await;
            }
            // The claim must outlive the push and its ack.
            if claim_until < Instant::now() + self.claim_needed()
                && !self
                    .extend(
                        &delivered,
                        &mut claim_until,
                        self.push_budget() + CLAIM_SLACK,
                    )
                    .await
            {
                // A probe that never went must not leave the circuit waiting for it.
                if admission == Admission::Probe {
                    self.circuit.probe_abandoned();
                }
                return;
            }
            tries += 1;
            let outcome = self.push(&delivered, tries).await;
            // The sink slows down before this push's place is given up: no push may take
            // it and leave before the pace knows.
            if let PushOutcome::SlowDown { after } = &outcome {
                self.pace.slow_down(*after);
            }
            // Its place among the pushes is for the next push: waiting for a retry, or
            // for an unreachable sink, never holds one.
            drop(room);
            let settlement =
                outcome.settlement(delivered.attempt, delivered.delivery_id, unreached);
            if settlement.sink_answered {
                self.circuit_answered(judged);
            } else {
                self.circuit_failed(admission, judged);
            }
            let after = match settlement.then {
                Then::Ack => {
                    // Acknowledged with others that arrive meanwhile (see
                    // `acknowledge_in_batches`); a stopped acker leaves it to come again.
                    let _ = acks.send(delivered.delivery_id);
                    return;
                }
                Then::RetryLater { after } => {
                    if let PushOutcome::Rejected { status } = outcome {
                        debug!(namespace = %self.namespace, status, attempt = delivered.attempt, "a sink rejected an expiration");
                    }
                    after
                }
                Then::PushAgain => {
                    // Its claim is renewed while it waits for the pace.
                    debug!(namespace = %self.namespace, "a sink asked to be sent less; slowing down");
                    continue;
                }
                Then::Hold { wait } => {
                    unreached += 1;
                    debug!(namespace = %self.namespace, reason = ?outcome.failure(), ?wait, "a sink is unreachable; holding the expiration");
                    if !self
                        .extend(&delivered, &mut claim_until, wait + HOLD_STEP)
                        .await
                    {
                        return;
                    }
                    tokio::select! {
                        () = leaving.now() => return self.leave_unsent(&delivered, &leaving).await,
                        () = tokio::time::sleep(wait) => {}
                    }
                    continue;
                }
            };
            // Handed back: the backend delivers it again after `after`, as the next
            // attempt, or buries it if this was the last; meanwhile it takes no place in
            // the subscription's window, so the expirations behind it keep flowing. If
            // the hand-back fails, its claim still ends on its own and it comes back the
            // same way, only sooner.
            if let Err(error) = self
                .expirations
                .retry_later(
                    self.namespace.clone(),
                    delivered.delivery_id,
                    after,
                    Hold::Released,
                )
                .await
            {
                debug!(namespace = %self.namespace, %error, "handing a push back for later failed; it comes back when its claim ends");
            }
            return;
        }
    }

    /// Gives back a delivery a pause or stop caught unsent, to another subscriber: the
    /// backend sends this subscription nothing more, so it ends.
    async fn leave_unsent(&self, delivered: &Delivered, leaving: &Leaving) {
        leaving.given_back.notify_one();
        self.give_back_unsent(delivered, GiveBack::Leaving).await;
    }

    /// Hands back a delivery that was not sent (a pause or stop caught it, or it waits
    /// out an open circuit elsewhere), its attempt refunded; if that fails it comes back
    /// when its claim ends, as the next attempt.
    async fn give_back_unsent(&self, delivered: &Delivered, when: GiveBack) {
        let given = self
            .expirations
            .give_back(self.namespace.clone(), delivered.delivery_id, when)
            .await;
        if let Err(error) = given {
            debug!(namespace = %self.namespace, %error, "giving back an unsent push failed; it comes back when its claim ends");
        }
    }

    /// Waits for the circuit to let this push go, then for a place among the pushes in
    /// flight, keeping the claim alive meanwhile. None if the claim was lost (it was
    /// handed to another attempt).
    async fn admitted(
        &self,
        delivered: &Delivered,
        judged: Judged,
        mut admission: Option<Admission>,
        claim_until: &mut Instant,
    ) -> Option<(Admission, SemaphorePermit<'_>)> {
        // Kept across the claim's renewals: a probe once admitted stays the probe.
        loop {
            let renew_at = claim_until
                .checked_sub(self.claim_needed() + RENEW_AHEAD)
                .unwrap_or_else(Instant::now);
            tokio::select! {
                // A closed circuit and room admit at once: no renewal, no round trip to
                // the backend.
                biased;
                room = self.circuit_then_room(judged, &mut admission) => {
                    return admission.map(|admission| (admission, room));
                }
                () = tokio::time::sleep_until(renew_at) => {
                    if !self.extend(delivered, claim_until, HOLD_STEP + self.push_budget() + CLAIM_SLACK).await {
                        if admission == Some(Admission::Probe) {
                            self.circuit.probe_abandoned();
                        }
                        return None;
                    }
                }
            }
        }
    }

    /// The circuit's word (kept in `admission` once had: this is cancelled and called
    /// again while the claim is renewed), then a place among the pushes in flight, then
    /// the sink's pace. The circuit first: a push waiting for the circuit holds no place
    /// another could use.
    async fn circuit_then_room(
        &self,
        judged: Judged,
        admission: &mut Option<Admission>,
    ) -> SemaphorePermit<'_> {
        if admission.is_none() {
            *admission = Some(self.circuit.admit(judged).await);
        }
        let room = self
            .room
            .acquire()
            .await
            .expect("a sink's room is never closed");
        self.pace.ready().await;
        room
    }

    /// The claim a push needs left as it starts: the push itself, then its ack.
    fn claim_needed(&self) -> Duration {
        self.push_budget() + CLAIM_SLACK / 4
    }

    /// Moves the delivery's claim to end `by` from now; false if it is no longer ours.
    /// A backend that fails to answer (a replica's database blinks) is asked again while
    /// the claim lasts: giving up would cost the delivery an attempt.
    async fn extend(&self, delivered: &Delivered, claim_until: &mut Instant, by: Duration) -> bool {
        loop {
            let asked_at = Instant::now();
            let extended = self
                .expirations
                .retry_later(
                    self.namespace.clone(),
                    delivered.delivery_id,
                    by,
                    Hold::Kept,
                )
                .await;
            match extended {
                Ok(true) => {
                    *claim_until = asked_at + by;
                    return true;
                }
                Ok(false) => return false,
                Err(error) if Instant::now() + EXTEND_AGAIN_AFTER < *claim_until => {
                    debug!(namespace = %self.namespace, %error, "extending a push's claim failed; asking again");
                    tokio::time::sleep(EXTEND_AGAIN_AFTER).await;
                }
                Err(error) => {
                    warn!(namespace = %self.namespace, %error, "a push's claim could not be extended before it ended; it is delivered again");
                    return false;
                }
            }
        }
    }

    /// One push, counted in the sink's metrics.
    async fn push(&self, delivered: &Delivered, try_number: u32) -> PushOutcome {
        let in_flight = CountedInFlight::start(&self.series.in_flight);
        let span = spans::push_started(delivered, self.sink.kind(), try_number);
        let started = Instant::now();
        let outcome = self.sink.push(delivered, self.signing.as_deref()).await;
        drop(in_flight);
        if let Some(span) = span {
            match outcome {
                // Acknowledged by the pusher right after (see `Then::Ack`).
                PushOutcome::Delivered => span.acknowledged(),
                _ => span.answered(outcome.label(), outcome.failure().is_some()),
            }
        }
        self.series
            .push_seconds
            .observe(started.elapsed().as_secs_f64());
        self.series.pushed(outcome.label());
        if let Some(failure) = outcome.failure() {
            *self
                .last_error
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(failure);
        }
        outcome
    }

    fn circuit_answered(&self, judged: Judged) {
        let was = self.circuit.gauge_value();
        self.circuit.sink_answered(judged);
        if was != 0 {
            info!(namespace = %self.namespace, sink = %self.shown_as, "a sink answers again: pushing");
        }
        self.show_circuit();
    }

    fn circuit_failed(&self, admission: Admission, judged: Judged) {
        let was = self.circuit.gauge_value();
        self.circuit.sink_failed(admission, judged);
        if was == 0 && self.circuit.gauge_value() != 0 {
            warn!(namespace = %self.namespace, sink = %self.shown_as, "a sink keeps failing: pushes paused, probing it");
        }
        self.show_circuit();
    }

    fn show_circuit(&self) {
        self.series.circuit.set(self.circuit.gauge_value());
    }
}

/// A push counted in `tickd_sink_in_flight` until it ends: answered, or dropped unfinished
/// (a stopping pusher, an ended subscription).
struct CountedInFlight<'series>(&'series Gauge);

impl<'series> CountedInFlight<'series> {
    fn start(gauge: &'series Gauge) -> Self {
        gauge.inc();
        CountedInFlight(gauge)
    }
}

impl Drop for CountedInFlight<'_> {
    fn drop(&mut self) {
        self.0.dec();
    }
}
