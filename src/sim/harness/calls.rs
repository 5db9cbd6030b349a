//! The harness's client calls: each queues one call to the simulated process, or acts as
//! a client would (subscribing, acking what it received, letting time pass).

use std::sync::{Arc, LazyLock};
use std::time::Duration;

use tokio::sync::oneshot;

use super::{Call, Client, Harness, KEYS, MAX_ATTEMPTS, MILLISECOND, NAMESPACES, REGISTERED_IN};
use crate::cron::CalendarSchedule;
use crate::domain::{Calendar, Due, NewTimer, SubscribeOptions, Target, TimerId, TimerRef};
use crate::local::table::command::{Command, Reschedule};
use crate::sim::ledger::{Held, Ledger};
use crate::sim::model::{payload_of, trace_of, Outcome, Registration};
use crate::sim::node::Node;

/// The cron schedules registrations use: every 1, 2 or 5 seconds, in UTC. Parsed once for
/// the whole process and shared by every run, as a schedule is a pure function of its
/// expression and parsing one costs more than the rest of a registration's step; each
/// restart's recovery is handed them too (see [`Node::start`]).
pub(super) static SCHEDULES: LazyLock<[Calendar; 3]> = LazyLock::new(|| {
    [1, 2, 5].map(|every| {
        let schedule = CalendarSchedule::parse(&format!("*/{every} * * * * *"), "UTC")
            .expect("a valid cron expression");
        Calendar(Arc::new(schedule))
    })
});

/// The kinds of timer a registration makes.
enum Kind {
    /// One firing, perhaps repeating every `repeat` nanoseconds.
    Plain { repeat: Option<u64> },
    /// A cron timer firing every few seconds, in UTC.
    Cron(Calendar),
    /// A lease: it fires `ttl` nanoseconds after its registration or its latest Touch.
    Lease { ttl: u64 },
}

impl Harness {
    pub(super) fn node(&mut self) -> &mut Node {
        self.node.as_mut().expect("a step runs on a started node")
    }

    /// Registers a plain, repeating, cron or lease timer. Cron timers and leases carry no
    /// key: a keyed registration in doubt could replace one, and then neither a Touch's
    /// answer nor a firing's schedule would be the model's to judge.
    pub(super) fn register(&mut self) {
        let namespace = REGISTERED_IN[self.choices.below_usize(REGISTERED_IN.len())];
        let kind = match self.choices.below(10) {
            0 => Kind::Cron(SCHEDULES[self.choices.below_usize(3)].clone()),
            1 | 2 => Kind::Lease {
                ttl: 20 * MILLISECOND + self.choices.below(300 * MILLISECOND),
            },
            _ => Kind::Plain {
                repeat: self
                    .choices
                    .chance(1, 8)
                    .then(|| 20 * MILLISECOND + self.choices.below(200 * MILLISECOND)),
            },
        };
        let key = matches!(kind, Kind::Plain { .. })
            .then(|| self.choices.chance(1, 3))
            .unwrap_or(false)
            .then(|| KEYS[self.choices.below_usize(KEYS.len())].to_owned());
        let replace = key.is_some() && self.choices.chance(1, 2);
        let (repeat, calendar, ttl) = match kind {
            Kind::Plain { repeat } => (repeat, None, None),
            Kind::Cron(calendar) => (None, Some(calendar), None),
            Kind::Lease { ttl } => (None, None, Some(ttl)),
        };
        let asked_unix = self.now() + ttl.unwrap_or_else(|| self.choices.below(300 * MILLISECOND));
        let deadline_unix = match &calendar {
            Some(calendar) => calendar
                .first_firing(asked_unix)
                .expect("a schedule every few seconds always fires again"),
            None => asked_unix,
        };
        let token = self.model.registered(Registration {
            namespace: namespace.to_owned(),
            key: key.clone(),
            deadline_unix,
            repeat,
            calendar: calendar.clone(),
            ttl,
            outcome: Outcome::Waiting,
        });
        self.trace(format_args!(
            "register {token} {namespace} {key:?} replace={replace} at={deadline_unix} repeat={repeat:?} cron={:?} ttl={ttl:?}",
            calendar.as_ref().map(|calendar| calendar.expression())
        ));
        let (reply, answer) = oneshot::channel();
        self.node().send(Command::Register {
            timers: vec![NewTimer {
                namespace: namespace.to_owned(),
                key,
                due: Due::AtUnix(asked_unix),
                payload: payload_of(token),
                repeat: repeat.map(Duration::from_nanos),
                ttl: ttl.map(Duration::from_nanos),
                calendar,
                replace,
                trace: trace_of(token),
            }],
            reply,
        });
        self.calls.push(Call::Register { token, answer });
    }

    /// A lease's heartbeat (the call the API's Touch and KeepAlive make), on any timer the
    /// model knows: one that is no lease, or a cron timer, must be refused unless the
    /// heartbeat gives a ttl (which makes a plain timer a lease).
    pub(super) fn touch(&mut self) {
        let Some((id, namespace)) = self.known_timer() else {
            return self.advance();
        };
        let ttl = self
            .choices
            .chance(1, 3)
            .then(|| 20 * MILLISECOND + self.choices.below(300 * MILLISECOND));
        self.trace(format_args!("touch {id:016x} ttl={ttl:?}"));
        let (reply, answer) = oneshot::channel();
        self.node().send(Command::Touch {
            timer: TimerRef {
                namespace,
                target: Target::Id(TimerId(id)),
            },
            ttl: ttl.map(Duration::from_nanos),
            reply,
        });
        let sent_at = self.now();
        self.calls.push(Call::Touch {
            id,
            ttl,
            sent_at,
            answer,
        });
    }

    /// Sends every dead expiration of a namespace back to delivery (the API's Redrive).
    pub(super) fn redrive(&mut self) {
        let namespace = NAMESPACES[self.choices.below_usize(NAMESPACES.len())];
        self.trace(format_args!("redrive {namespace}"));
        let now = self.now();
        let candidates = self.ledger.redrive_sent(namespace, now, MAX_ATTEMPTS);
        let later = self.node().redrive(namespace.to_owned());
        self.redrives.push((later, namespace, candidates));
    }

    /// A timer the model knows, by id, with its namespace.
    pub(super) fn known_timer(&mut self) -> Option<(u64, String)> {
        let ids: Vec<(u64, String)> = self
            .model
            .timers
            .iter()
            .map(|(id, timer)| (*id, timer.namespace.clone()))
            .collect();
        (!ids.is_empty()).then(|| ids[self.choices.below_usize(ids.len())].clone())
    }

    pub(super) fn cancel(&mut self) {
        let Some((id, namespace)) = self.known_timer() else {
            return self.advance();
        };
        self.trace(format_args!("cancel {id:016x}"));
        let (reply, answer) = oneshot::channel();
        self.node().send(Command::Cancel {
            timer: TimerRef {
                namespace,
                target: Target::Id(TimerId(id)),
            },
            reply,
        });
        self.calls.push(Call::Cancel { id, answer });
    }

    pub(super) fn reschedule(&mut self) {
        let Some((id, namespace)) = self.known_timer() else {
            return self.advance();
        };
        let asked = self.now() + self.choices.below(300 * MILLISECOND);
        self.trace(format_args!("reschedule {id:016x} to {asked}"));
        let (reply, answer) = oneshot::channel();
        self.node().send(Command::Reschedule(Box::new(Reschedule {
            timer: TimerRef {
                namespace,
                target: Target::Id(TimerId(id)),
            },
            due: Due::AtUnix(asked),
            payload: None,
            trace: None,
            reply,
        })));
        self.calls.push(Call::Reschedule { id, asked, answer });
    }

    pub(super) fn subscribe(&mut self) {
        let namespace = NAMESPACES[self.choices.below_usize(NAMESPACES.len())];
        let ack_timeout = 50 * MILLISECOND + self.choices.below(400 * MILLISECOND);
        let subscription = self.node().subscribe(SubscribeOptions {
            namespace: namespace.to_owned(),
            observer: false,
            ack_timeout: Some(Duration::from_nanos(ack_timeout)),
            max_unacked: Some(1_000),
            auto_ack: false,
        });
        let number = self.ledger.subscribed();
        self.trace(format_args!(
            "subscribe {number} {namespace} timeout={ack_timeout}"
        ));
        self.clients.push(Client {
            namespace,
            subscription,
            ack_timeout,
            number,
        });
    }

    pub(super) fn unsubscribe(&mut self) {
        if self.clients.is_empty() {
            return self.advance();
        }
        let client = self
            .clients
            .remove(self.choices.below_usize(self.clients.len()));
        self.trace(format_args!("unsubscribe {}", client.number));
        let another = self
            .clients
            .iter()
            .any(|other| other.namespace == client.namespace);
        self.ledger
            .unsubscribed(client.number, self.now(), another, MAX_ATTEMPTS);
        drop(client.subscription);
    }

    /// Acks one or two deliveries the clients received, possibly from before a restart.
    pub(super) fn ack(&mut self) {
        let count = 1 + self.choices.below_usize(2);
        let Some(held) = self.ledger.pick_to_ack(&mut self.choices, count) else {
            return self.advance();
        };
        self.send_ack(held);
    }

    pub(super) fn send_ack(&mut self, held: Vec<Held>) {
        let (namespace, ids) = Ledger::ids(&held);
        self.trace(format_args!("ack send {namespace} {ids:x?}"));
        let later = self.node().ack(namespace, ids);
        let now = self.now();
        self.acks.push((later, held, now));
    }

    /// Asks for a snapshot: the worker streams it chunk by chunk over the next steps, and
    /// the store seals it and deletes the files it replaces, on the simulated disk, where
    /// crashes and faults may hit any of it.
    pub(super) fn snapshot(&mut self) {
        self.trace("snapshot");
        self.node().ask_for_snapshot();
    }

    /// Moves the clock: a little, or to the next thing due.
    pub(super) fn advance(&mut self) {
        let node_wakeup = self.node.as_ref().and_then(Node::next_wakeup);
        let next = [node_wakeup, self.pusher_wakeup()]
            .into_iter()
            .flatten()
            .min();
        let now = self.clock_monotonic();
        let by = match next {
            Some(due) if due > now && self.choices.chance(1, 2) => due - now,
            _ => 1 + self.choices.below(40 * MILLISECOND),
        };
        // The store thread wakes on its own for `--sync interval`'s fsync: no further.
        let sync_due = self.node.as_ref().and_then(Node::interval_sync_due);
        let by = match sync_due {
            Some(due) if due > now => by.min(due - now),
            _ => by,
        };
        self.trace(format_args!("advance {by}"));
        self.clock.advance(by);
    }
}
