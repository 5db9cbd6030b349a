//! The reference model: what tickd promised, from the answers it gave, and the check of
//! every expiration it delivers against those promises.
//!
//! The model knows only what a client knows: the calls it made and the answers it got.
//! A call answered is a promise; a call never answered (its process crashed, or its log
//! failed) is in doubt, and both of its outcomes are allowed; a call refused must never
//! take effect. Each registration carries a unique payload (its token), so that an
//! expiration names the registration it came from even when its answer never came.

use std::collections::BTreeMap;

use crate::domain::{Calendar, Delivered, Registered};

/// A registration as the client made it.
#[derive(Debug, Clone)]
pub(crate) struct Registration {
    pub(crate) namespace: String,
    pub(crate) key: Option<String>,
    /// Its first firing's deadline: for a cron timer, the first cron time at or after the
    /// one asked for, as the crate's own schedule computes it.
    pub(crate) deadline_unix: u64,
    pub(crate) repeat: Option<u64>,
    /// A cron schedule (every few seconds, in UTC).
    pub(crate) calendar: Option<Calendar>,
    /// A lease's time to live (nanoseconds).
    pub(crate) ttl: Option<u64>,
    pub(crate) outcome: Outcome,
}

/// What became of a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    Waiting,
    /// Answered; for a registration, with its timer's id.
    Answered(u64),
    /// Refused with a definite error: it must never take effect.
    Refused,
    /// Never answered: either outcome is allowed.
    InDoubt,
}

/// A timer the model knows by id.
#[derive(Debug, Clone)]
pub(crate) struct Timer {
    pub(crate) namespace: String,
    /// Tokens its expirations may carry, and deadlines its next firing may have: the
    /// acknowledged ones, and those of calls in doubt.
    pub(crate) tokens: Vec<u64>,
    pub(crate) deadlines: Vec<u64>,
    /// True for a repeating or a cron timer: it fires again and again.
    pub(crate) repeat: bool,
    /// A cron timer's schedule: each of its firings is at one of its times, or at a
    /// deadline a call set (a Reschedule moves its next firing).
    pub(crate) calendar: Option<Calendar>,
    /// A lease's times to live it may have: the one its registration or its latest
    /// answered Touch set, and those Touches in doubt since gave. Empty: no lease.
    pub(crate) ttls: Vec<u64>,
    pub(crate) state: TimerState,
    /// True while an acknowledged registration promises a firing.
    pub(crate) must_fire: bool,
    /// When its latest acknowledged change was answered (sim time, unix nanos).
    pub(crate) changed_at: u64,
    /// Firings seen, by fired count, each with its fired time.
    pub(crate) fired: BTreeMap<u64, u64>,
    /// The deadlines and ttls its answered changes of the last sync interval replaced:
    /// with `--sync interval` a power cut may take those changes, bringing them back.
    pub(crate) superseded: Vec<Superseded>,
    /// When its creation was answered (or, learned from a firing, when that fired).
    pub(crate) created_at: u64,
    /// A power cut may have taken its creation (`--sync interval`): its id may be handed
    /// out again, to a new timer.
    pub(crate) may_be_gone: bool,
}

/// What one answered change replaced, and when it was answered.
#[derive(Debug, Clone)]
pub(crate) struct Superseded {
    pub(crate) at: u64,
    pub(crate) deadlines: Vec<u64>,
    pub(crate) ttls: Vec<u64>,
    pub(crate) repeat: bool,
}

/// How long an answered change may stay only in the page cache with `--sync interval`:
/// the store fsyncs within this of writing it, so a power cut takes at most the changes
/// answered this long before it (docs/durability.md, `--sync`).
pub(crate) const LOSABLE_NANOS: u64 = crate::local::store::SYNC_INTERVAL.as_nanos() as u64;

impl Timer {
    /// Keeps what a change answered at `now` replaces, for as long as a power cut may take
    /// the change back.
    fn supersede(&mut self, now: u64) {
        self.superseded
            .retain(|superseded| superseded.at + LOSABLE_NANOS >= now);
        self.superseded.push(Superseded {
            at: now,
            deadlines: self.deadlines.clone(),
            ttls: self.ttls.clone(),
            repeat: self.repeat,
        });
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TimerState {
    Pending,
    /// A cancel answered true at this time: nothing fires after it.
    Cancelled(u64),
    /// A cancel in doubt: it may or may not fire.
    MaybeCancelled,
}

/// A violated promise: what, and of which timer or delivery.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Violation(pub(crate) String);

/// Everything promised so far.
#[derive(Default)]
pub(crate) struct Model {
    pub(crate) registrations: Vec<Registration>,
    pub(crate) timers: BTreeMap<u64, Timer>,
    /// Ids a power cut freed and a new timer was given (see [`Timer::may_be_gone`]): the
    /// ledger forgets the deliveries of the timer that had it before.
    pub(crate) reused_ids: Vec<u64>,
}

impl Model {
    /// A new registration; its token is its index.
    pub(crate) fn registered(&mut self, registration: Registration) -> u64 {
        self.registrations.push(registration);
        (self.registrations.len() - 1) as u64
    }

    /// A registration's answer: its timer is now promised (or refused).
    pub(crate) fn register_answered(
        &mut self,
        token: u64,
        answer: Result<&Registered, bool>,
        now: u64,
    ) -> Result<(), Violation> {
        let registration = &mut self.registrations[token as usize];
        let registered = match answer {
            Ok(registered) => registered,
            Err(definite) => {
                registration.outcome = if definite {
                    Outcome::Refused
                } else {
                    Outcome::InDoubt
                };
                return Ok(());
            }
        };
        let id = registered.timer.id.0;
        registration.outcome = Outcome::Answered(id);
        let registration = registration.clone();
        if !registered.created && !registered.replaced {
            // The key's pending timer was returned, unchanged.
            return Ok(());
        }
        if registered.created {
            if let Some(known) = self.timers.get(&id) {
                if !known.may_be_gone {
                    return Err(Violation(format!(
                        "registration {token} created timer {id:016x}, an id an acknowledged registration already had"
                    )));
                }
                // Its first timer was lost with the power cut: this is another one.
                self.timers.remove(&id);
                self.reused_ids.push(id);
            }
        }
        let timer = self.timers.entry(id).or_insert_with(|| Timer {
            namespace: registration.namespace.clone(),
            tokens: Vec::new(),
            deadlines: Vec::new(),
            repeat: false,
            calendar: None,
            ttls: Vec::new(),
            state: TimerState::Pending,
            must_fire: false,
            changed_at: now,
            fired: BTreeMap::new(),
            superseded: Vec::new(),
            created_at: now,
            may_be_gone: false,
        });
        timer.supersede(now);
        // Tokens only accumulate: a firing from before the change may still be delivered.
        timer.tokens.push(token);
        timer.deadlines = vec![registered.timer.deadline_unix];
        timer.repeat = registration.repeat.is_some() || registration.calendar.is_some();
        timer.calendar = registration.calendar.clone();
        timer.ttls = registration.ttl.into_iter().collect();
        timer.state = TimerState::Pending;
        timer.must_fire = true;
        timer.changed_at = now;
        Ok(())
    }

    /// A reschedule's answer (`Some(deadline)`), or its doubt (`None`).
    pub(crate) fn rescheduled(&mut self, id: u64, deadline: Option<u64>, asked: u64, now: u64) {
        let Some(timer) = self.timers.get_mut(&id) else {
            return;
        };
        match deadline {
            Some(deadline) => {
                timer.supersede(now);
                timer.deadlines = vec![deadline];
                timer.changed_at = now;
            }
            None => timer.deadlines.push(asked),
        }
    }

    /// A Touch (a lease's heartbeat) sent at `sent_at`, with the ttl it gave if any, and
    /// its answer: `Ok(Some(deadline))` answered, `Ok(None)` in doubt, `Err(())` refused.
    /// An answered one must have moved the deadline to `sent_at` plus the ttl (the one given,
    /// or the lease's), and never a cron timer's; from then on the lease fires at that
    /// deadline and no earlier, as after a Reschedule.
    pub(crate) fn touched(
        &mut self,
        id: u64,
        given_ttl: Option<u64>,
        answer: Result<Option<u64>, ()>,
        sent_at: u64,
    ) -> Result<(), Violation> {
        let Some(timer) = self.timers.get_mut(&id) else {
            return Ok(());
        };
        let ttls: Vec<u64> = match given_ttl {
            Some(ttl) => vec![ttl],
            None => timer.ttls.clone(),
        };
        match answer {
            Err(()) => {}
            Ok(None) => {
                if timer.calendar.is_none() {
                    timer.deadlines.extend(ttls.iter().map(|ttl| sent_at + ttl));
                    timer.ttls.extend(given_ttl);
                }
            }
            Ok(Some(deadline)) => {
                if timer.calendar.is_some() {
                    return Err(Violation(format!(
                        "a Touch of cron timer {id:016x} was answered (deadline {deadline}): a cron timer is no lease"
                    )));
                }
                let ttl = deadline.checked_sub(sent_at);
                if !ttl.is_some_and(|ttl| ttls.contains(&ttl)) {
                    return Err(Violation(format!(
                        "a Touch of lease {id:016x} at {sent_at} answered deadline {deadline}: its ttl is one of {ttls:?}"
                    )));
                }
                timer.supersede(sent_at);
                timer.ttls = ttl.into_iter().collect();
                timer.deadlines = vec![deadline];
                timer.changed_at = sent_at;
            }
        }
        Ok(())
    }

    /// A cancel's answer (`Some(found)`), or its doubt (`None`).
    pub(crate) fn cancelled(&mut self, id: u64, found: Option<bool>, now: u64) {
        let Some(timer) = self.timers.get_mut(&id) else {
            return;
        };
        match found {
            Some(true) => {
                timer.state = TimerState::Cancelled(now);
                timer.must_fire = false;
            }
            Some(false) => {}
            None => {
                timer.state = TimerState::MaybeCancelled;
                timer.must_fire = false;
            }
        }
    }

    /// Checks an expiration the first time any subscriber receives it.
    pub(crate) fn check_firing(&mut self, delivered: &Delivered) -> Result<(), Violation> {
        let expiration = &delivered.expiration;
        let id = expiration.id.0;
        let fired_count = expiration.fired_count;
        let token = token_of(&expiration.payload).ok_or_else(|| {
            Violation(format!("timer {id:016x} fired with a payload no call sent"))
        })?;
        let registration = self
            .registrations
            .get(token as usize)
            .ok_or_else(|| Violation(format!("timer {id:016x}: unknown token {token}")))?
            .clone();
        if expiration.trace != trace_of(token) {
            return Err(Violation(format!(
                "timer {id:016x} fired with trace context {:?}; registration {token} carried {:?}",
                expiration.trace,
                trace_of(token)
            )));
        }
        if registration.outcome == Outcome::Refused {
            return Err(Violation(format!(
                "registration {token} was refused, yet timer {id:016x} fired from it"
            )));
        }
        if expiration.fired_unix < expiration.deadline_unix {
            return Err(Violation(format!(
                "timer {id:016x} fired {} ns before its deadline",
                expiration.deadline_unix - expiration.fired_unix
            )));
        }
        let timer = match self.timers.get_mut(&id) {
            Some(timer) => timer,
            None => {
                // Its registration was in doubt (or still waiting): learned from the firing.
                if registration.deadline_unix != expiration.deadline_unix && fired_count == 1 {
                    return Err(Violation(format!(
                        "timer {id:016x} (registration {token}, in doubt) fired at deadline {} instead of {}",
                        expiration.deadline_unix, registration.deadline_unix
                    )));
                }
                self.timers.insert(
                    id,
                    Timer {
                        namespace: registration.namespace.clone(),
                        tokens: vec![token],
                        deadlines: vec![expiration.deadline_unix],
                        repeat: registration.repeat.is_some() || registration.calendar.is_some(),
                        calendar: registration.calendar.clone(),
                        ttls: registration.ttl.into_iter().collect(),
                        state: TimerState::Pending,
                        must_fire: false,
                        changed_at: expiration.fired_unix,
                        fired: BTreeMap::new(),
                        superseded: Vec::new(),
                        created_at: expiration.fired_unix,
                        may_be_gone: false,
                    },
                );
                self.timers.get_mut(&id).expect("inserted")
            }
        };
        if timer.fired.contains_key(&fired_count) {
            return Ok(());
        }
        // A keyed registration in doubt may have made the timer (a later one under its key
        // then returned or replaced it) or replaced it: its payload and deadline may be
        // the timer's.
        let replaced_in_doubt = registration.key.is_some()
            && matches!(registration.outcome, Outcome::InDoubt | Outcome::Waiting);
        if !timer.tokens.contains(&token) && !replaced_in_doubt {
            return Err(Violation(format!(
                "timer {id:016x} fired with registration {token}'s payload, which it never had"
            )));
        }
        if let TimerState::Cancelled(at) = timer.state {
            if expiration.fired_unix > at {
                return Err(Violation(format!(
                    "timer {id:016x} fired at {} after its cancel was acknowledged at {at}",
                    expiration.fired_unix
                )));
            }
        }
        // A firing after the timer's last acknowledged change must be at a deadline that
        // change (or a call in doubt since) set; one before it may still be the old one.
        let allowed = timer.deadlines.contains(&expiration.deadline_unix)
            || (replaced_in_doubt && registration.deadline_unix == expiration.deadline_unix);
        let repeating = timer.repeat
            || (replaced_in_doubt
                && (registration.repeat.is_some() || registration.calendar.is_some()));
        if !replaced_in_doubt {
            check_cron_firing(id, timer, expiration.deadline_unix, expiration.fired_unix)?;
        }
        if !repeating && expiration.fired_unix > timer.changed_at && !allowed {
            return Err(Violation(format!(
                "timer {id:016x} fired at deadline {}, which no call asked for (allowed {:?})",
                expiration.deadline_unix, timer.deadlines
            )));
        }
        timer.fired.insert(fired_count, expiration.fired_unix);
        if !timer.repeat {
            timer.must_fire = false;
        } else if expiration.fired_unix >= timer.changed_at {
            // A repeating timer kept its promise once it fired after its last change.
            timer.must_fire = false;
        }
        Ok(())
    }

    /// True while an acknowledged timer has yet to fire (see [`Model::unfired`]).
    pub(crate) fn owes_a_firing(&self) -> bool {
        self.timers.values().any(|timer| timer.must_fire)
    }

    /// Timers an acknowledged call promised a firing of that never came.
    pub(crate) fn unfired(&self) -> Vec<u64> {
        self.timers
            .iter()
            .filter(|(_, timer)| timer.must_fire)
            .map(|(id, _)| *id)
            .collect()
    }

    /// A power cut with `--sync interval`: the changes answered since `lost_from` may be
    /// gone. What they replaced may come back (deadlines, ttls), a cancel among them may
    /// not have happened, and a timer one of them promised need not fire. Everything
    /// answered before `lost_from` was synced, and stays promised.
    pub(crate) fn power_cut(&mut self, lost_from: u64) {
        for timer in self.timers.values_mut() {
            for superseded in std::mem::take(&mut timer.superseded) {
                if superseded.at >= lost_from {
                    timer.deadlines.extend(superseded.deadlines);
                    timer.ttls.extend(superseded.ttls);
                    timer.repeat |= superseded.repeat;
                }
            }
            if timer.changed_at >= lost_from {
                timer.must_fire = false;
            }
            timer.may_be_gone |= timer.created_at >= lost_from;
            if matches!(timer.state, TimerState::Cancelled(at) if at >= lost_from) {
                timer.state = TimerState::MaybeCancelled;
            }
        }
    }

    /// Calls still waiting for an answer are in doubt once their process is gone.
    pub(crate) fn crashed(&mut self) {
        for registration in &mut self.registrations {
            if registration.outcome == Outcome::Waiting {
                registration.outcome = Outcome::InDoubt;
            }
        }
    }
}

/// A cron timer's firing after its latest acknowledged change was answered: at a time of
/// its schedule or at a deadline a call set, and never before the deadline that change set
/// (a firing then at an earlier schedule time would be early). One from before the change
/// may be at a deadline the change replaced.
fn check_cron_firing(
    id: u64,
    timer: &Timer,
    deadline_unix: u64,
    fired_unix: u64,
) -> Result<(), Violation> {
    let Some(calendar) = &timer.calendar else {
        return Ok(());
    };
    if fired_unix <= timer.changed_at {
        return Ok(());
    }
    let on_schedule = calendar.next_at_or_after(deadline_unix) == Some(deadline_unix);
    if !on_schedule && !timer.deadlines.contains(&deadline_unix) {
        return Err(Violation(format!(
            "cron timer {id:016x} ({}) fired at deadline {deadline_unix}, neither a time of its schedule nor one a call set",
            calendar.expression()
        )));
    }
    let earliest = timer.deadlines.iter().min().copied().unwrap_or(0);
    if deadline_unix < earliest {
        return Err(Violation(format!(
            "cron timer {id:016x} fired at deadline {deadline_unix}, before {earliest}, the deadline its latest answered change set"
        )));
    }
    Ok(())
}

/// The payload that carries registration `token`.
pub(crate) fn payload_of(token: u64) -> bytes::Bytes {
    bytes::Bytes::from(format!("r{token}"))
}

/// The trace context registration `token` carries: one registration in two has one, its
/// trace id naming the token, so that a firing shows whose context it kept.
pub(crate) fn trace_of(token: u64) -> Option<std::sync::Arc<crate::domain::TraceContext>> {
    let traceparent = format!("00-{:032x}-{:016x}-01", token + 1, token + 1);
    (token % 2 == 1).then(|| {
        crate::domain::TraceContext::parse(&traceparent, "sim=1", "")
            .expect("a well-formed traceparent")
    })
}

fn token_of(payload: &[u8]) -> Option<u64> {
    std::str::from_utf8(payload.strip_prefix(b"r")?)
        .ok()?
        .parse()
        .ok()
}
