//! Cron timers on the worker thread, driven by a manual clock: each fires at its calendar
//! time (never a nanosecond early), across daylight saving time in both directions in
//! Europe/Berlin and America/New_York, on leap days and month ends, every second, and
//! yearly; a rescheduled timer fires at its new time only; a replaced one follows its new
//! schedule.

use std::sync::mpsc;
use std::sync::Arc;
use std::time::Duration;

use proptest::prelude::*;
use tickd::clock::{Clock, ManualClock};
use tickd::cron::CalendarSchedule;
use tickd::domain::{Calendar, Due, Expiration, NewTimer, Target, TimerRef, TimerView};
use tickd::domain::{FiredRound, Handoff};
use tickd::local::table::command::{Command, Reschedule};
use tickd::local::table::{TableConfig, TimerTable};
use tickd::metrics::Metrics;
use tickd::worker::{Worker, WorkerConfig, WorkerHandle};
use tokio::sync::oneshot;

const SECOND: u64 = 1_000_000_000;
const PATIENCE: Duration = Duration::from_secs(20);

/// A worker over a 1 ms-tick table on a manual clock starting at `start_unix_seconds`.
struct Manual {
    clock: ManualClock,
    worker: Worker<TimerTable>,
    handle: WorkerHandle<Command>,
    fired: mpsc::Receiver<Expiration>,
}

impl Manual {
    fn start(start_unix_seconds: u64) -> Self {
        let clock = ManualClock::starting_at_unix(start_unix_seconds * SECOND);
        let table = TimerTable::new(
            TableConfig {
                tick: Duration::from_millis(1),
                max_pending: 1_000,
                max_pending_per_namespace: 0,
                max_namespaces: 0,
            },
            Metrics::new(),
        );
        let (sender, fired) = mpsc::channel();
        let sink = move |rounds: Vec<FiredRound>| {
            for handoff in rounds.into_iter().flat_map(|round| round.handoffs) {
                if let Handoff::Fired(expiration) = handoff {
                    sender.send(expiration).unwrap();
                }
            }
        };
        let worker = Worker::spawn(table, clock.clone(), WorkerConfig::default(), sink).unwrap();
        let handle = worker.handle();
        Self {
            clock,
            worker,
            handle,
            fired,
        }
    }

    fn now_unix(&self) -> u64 {
        self.clock.now().unix
    }

    fn register(&self, timer: NewTimer) -> TimerView {
        let (reply, answer) = oneshot::channel();
        self.handle
            .send(Command::Register {
                timers: vec![timer],
                reply,
            })
            .unwrap();
        let registered = answer.blocking_recv().unwrap().pop().unwrap().unwrap();
        registered.timer
    }

    fn get(&self, key: &str) -> Option<TimerView> {
        let (reply, answer) = oneshot::channel();
        self.handle
            .send(Command::Get {
                timer: reference(key),
                reply,
            })
            .unwrap();
        answer.blocking_recv().unwrap().ok()
    }

    fn reschedule(&self, key: &str, due: Due) -> Result<TimerView, tickd::domain::TimerError> {
        let (reply, answer) = oneshot::channel();
        self.handle
            .send(Command::Reschedule(Box::new(Reschedule {
                timer: reference(key),
                due,
                payload: Some("moved".into()),
                trace: None,
                reply,
            })))
            .unwrap();
        answer.blocking_recv().unwrap()
    }

    /// Moves the clock to `unix` and lets the worker act on it (a round trip through its
    /// queue: everything due by then has been handed to the sink when it returns).
    fn advance_to(&self, unix: u64) {
        let now = self.now_unix();
        assert!(unix >= now, "the clock only moves forward");
        self.clock.advance(unix - now);
        let _ = self.get("a-round-trip");
    }

    /// The next firing of `key`: nothing fires a nanosecond before its deadline, and it
    /// fires within the tick after it. Returns the expiration.
    fn next_firing(&self, key: &str) -> Expiration {
        let deadline = self.get(key).expect("still pending").deadline_unix;
        self.advance_to(deadline - 1);
        assert!(
            self.fired.try_recv().is_err(),
            "{key} fired before its deadline {deadline}"
        );
        self.advance_to(deadline + 1_000_000);
        let expiration = self.fired.recv_timeout(PATIENCE).expect("fired");
        assert_eq!(expiration.deadline_unix, deadline);
        assert!(expiration.fired_unix >= expiration.deadline_unix, "early");
        expiration
    }

    /// The deadlines of the next `count` firings of a cron timer registered now.
    fn firings(&self, expression: &str, zone: &str, count: usize) -> Vec<u64> {
        self.register(cron_timer("cron", expression, zone));
        let firings: Vec<u64> = (0..count)
            .map(|index| {
                let expiration = self.next_firing("cron");
                assert_eq!(expiration.fired_count, index as u64 + 1);
                assert_eq!(
                    expiration.calendar.as_ref().map(|c| c.expression()),
                    Some(expression)
                );
                expiration.deadline_unix / SECOND
            })
            .collect();
        firings
    }
}

impl Drop for Manual {
    fn drop(&mut self) {
        assert!(self.worker.is_running(), "the worker thread stopped");
    }
}

fn reference(key: &str) -> TimerRef {
    TimerRef {
        namespace: "calendar".into(),
        target: Target::Key(key.into()),
    }
}

fn plain_timer(key: &str, due: Due) -> NewTimer {
    NewTimer {
        namespace: "calendar".into(),
        key: Some(key.into()),
        due,
        payload: key.as_bytes().to_vec().into(),
        repeat: None,
        ttl: None,
        calendar: None,
        replace: false,
        trace: None,
    }
}

fn cron_timer(key: &str, expression: &str, zone: &str) -> NewTimer {
    let schedule = CalendarSchedule::parse(expression, zone).unwrap();
    NewTimer {
        calendar: Some(Calendar(Arc::new(schedule))),
        // From just after now: a first firing due at once would race the test's next step.
        ..plain_timer(key, Due::After(Duration::from_nanos(1)))
    }
}

#[test]
fn a_daily_wall_time_in_the_spring_gap_fires_once_at_the_end_of_the_gap() {
    // Europe/Berlin, 2025-03-30: 02:00 CET jumps to 03:00 CEST; 02:30 does not exist.
    let berlin = Manual::start(1_743_206_400); // 2025-03-29 00:00 UTC
    assert_eq!(
        berlin.firings("30 2 * * *", "Europe/Berlin", 3),
        [1_743_211_800, 1_743_296_400, 1_743_381_000],
        "02:30 CET, 03:00 CEST (the gap's end), 02:30 CEST"
    );
    // America/New_York, 2025-03-09: 02:00 EST jumps to 03:00 EDT.
    let new_york = Manual::start(1_741_392_000); // 2025-03-08 00:00 UTC
    assert_eq!(
        new_york.firings("30 2 * * *", "America/New_York", 3),
        [1_741_419_000, 1_741_503_600, 1_741_588_200]
    );
}

#[test]
fn a_daily_wall_time_in_the_autumn_fold_fires_once_at_its_first_occurrence() {
    // Europe/Berlin, 2025-10-26: 03:00 CEST goes back to 02:00 CET; 02:30 comes twice.
    let berlin = Manual::start(1_761_350_400); // 2025-10-25 00:00 UTC
    assert_eq!(
        berlin.firings("30 2 * * *", "Europe/Berlin", 3),
        [1_761_352_200, 1_761_438_600, 1_761_528_600],
        "02:30 CEST, 02:30 CEST (first occurrence only), 02:30 CET"
    );
    // America/New_York, 2025-11-02: 02:00 EDT goes back to 01:00 EST; 01:30 comes twice.
    let new_york = Manual::start(1_761_955_200); // 2025-11-01 00:00 UTC
    assert_eq!(
        new_york.firings("30 1 * * *", "America/New_York", 3),
        [1_761_975_000, 1_762_061_400, 1_762_151_400]
    );
}

#[test]
fn every_second_fires_on_whole_seconds_through_both_berlin_transitions() {
    for transition in [1_743_296_400_u64, 1_761_440_400] {
        let berlin = Manual::start(transition - 3);
        let firings = berlin.firings("*/1 * * * * *", "Europe/Berlin", 6);
        let expected: Vec<u64> = (transition - 2..=transition + 3).collect();
        assert_eq!(
            firings, expected,
            "one firing a second, none doubled or lost"
        );
    }
}

#[test]
fn leap_days_month_ends_and_yearly() {
    let utc = Manual::start(1_798_761_600); // 2027-01-01 00:00 UTC
    assert_eq!(
        utc.firings("0 0 29 2 *", "UTC", 2),
        [1_835_395_200, 1_961_625_600],
        "29 February 2028, then 2032"
    );
    let utc = Manual::start(1_767_225_600); // 2026-01-01 00:00 UTC
    assert_eq!(
        utc.firings("0 0 L * *", "", 3),
        [1_769_817_600, 1_772_236_800, 1_774_915_200],
        "31 January, 28 February, 31 March"
    );
    let berlin = Manual::start(1_735_689_600); // 2025-01-01 00:00 UTC
    assert_eq!(
        berlin.firings("@yearly", "Europe/Berlin", 2),
        [1_767_222_000, 1_798_758_000],
        "midnight of 1 January in Berlin"
    );
}

#[test]
fn missed_cron_firings_collapse_into_one_late_firing() {
    let utc = Manual::start(1_767_225_600);
    utc.register(cron_timer("cron", "* * * * *", "UTC"));
    // Ten minutes pass at once (a stall, or the clock of a restart).
    utc.advance_to(utc.now_unix() + 600 * SECOND);
    let late = utc.fired.recv_timeout(PATIENCE).unwrap();
    assert_eq!(late.deadline_unix, (1_767_225_600 + 60) * SECOND);
    assert_eq!(late.fired_count, 1);
    assert!(
        utc.fired.try_recv().is_err(),
        "the missed minutes fired in a burst"
    );
    let next = utc.get("cron").unwrap().deadline_unix;
    assert!(next > utc.now_unix(), "the next firing is after now");
    assert_eq!(next % (60 * SECOND), 0, "on a whole minute");
    assert_eq!(utc.next_firing("cron").fired_count, 2);
}

#[test]
fn a_rescheduled_timer_fires_at_its_new_time_only() {
    let start = 1_767_225_600;
    let manual = Manual::start(start);
    manual.register(plain_timer("one-shot", Due::AtUnix((start + 10) * SECOND)));
    manual.register(cron_timer("cron", "30 * * * * *", "Europe/Berlin"));
    // Later, then earlier than first planned; the cron timer's next firing only.
    let moved = manual
        .reschedule("one-shot", Due::AtUnix((start + 20) * SECOND))
        .unwrap();
    assert_eq!(moved.deadline_unix, (start + 20) * SECOND);
    assert_eq!(manual.get("one-shot").unwrap().payload, "moved");
    manual
        .reschedule("cron", Due::AtUnix((start + 5) * SECOND))
        .unwrap();
    let cron = manual.next_firing("cron");
    assert_eq!(cron.deadline_unix, (start + 5) * SECOND);
    assert_eq!(cron.payload, "moved");
    assert_eq!(
        manual.get("cron").unwrap().deadline_unix,
        (start + 30) * SECOND,
        "then back on its schedule"
    );
    // Nothing at the old time of the one-shot timer.
    manual.advance_to((start + 10) * SECOND + 1_000_000);
    assert!(manual.fired.try_recv().is_err(), "fired at its old time");
    let one_shot = manual.next_firing("one-shot");
    assert_eq!(one_shot.deadline_unix, (start + 20) * SECOND);
    // A heartbeat does not make a cron timer a lease.
    let (reply, answer) = oneshot::channel();
    manual
        .handle
        .send(Command::Touch {
            timer: reference("cron"),
            ttl: Some(Duration::from_secs(1)),
            reply,
        })
        .unwrap();
    let refused = answer.blocking_recv().unwrap().unwrap_err();
    assert!(
        refused
            .to_string()
            .starts_with("ttl: a cron timer is not a lease"),
        "{refused}"
    );
    assert_eq!(manual.get("cron").unwrap().ttl, None);
    // Fired and gone: NOT_FOUND, and nothing changes.
    let gone = manual.reschedule("one-shot", Due::After(Duration::from_secs(1)));
    assert!(matches!(gone, Err(tickd::domain::TimerError::NotFound(_))));
    assert!(manual.get("one-shot").is_none());
}

#[test]
fn a_replaced_timer_takes_its_new_schedule_and_keeps_its_id() {
    let start = 1_767_225_600;
    let manual = Manual::start(start);
    let first = manual.register(plain_timer("job", Due::AtUnix((start + 30) * SECOND)));
    let mut replacement = cron_timer("job", "*/10 * * * * *", "UTC");
    replacement.replace = true;
    replacement.payload = "v2".into();
    replacement.due = Due::After(Duration::from_secs(1));
    let (reply, answer) = oneshot::channel();
    manual
        .handle
        .send(Command::Register {
            timers: vec![replacement],
            reply,
        })
        .unwrap();
    let replaced = answer.blocking_recv().unwrap().pop().unwrap().unwrap();
    assert!(replaced.replaced && !replaced.created);
    assert_eq!(replaced.timer.id, first.id);
    assert_eq!(replaced.timer.deadline_unix, (start + 10) * SECOND);
    let fired = manual.next_firing("job");
    assert_eq!(
        (fired.payload.as_ref(), fired.deadline_unix),
        (&b"v2"[..], (start + 10) * SECOND)
    );
    // Nothing at the replaced timer's old deadline but its own schedule's firing.
    assert_eq!(
        manual.next_firing("job").deadline_unix,
        (start + 20) * SECOND
    );
    assert_eq!(
        manual.next_firing("job").deadline_unix,
        (start + 30) * SECOND
    );
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, failure_persistence: None, ..ProptestConfig::default() })]

    /// Whatever the expression, zone and pace of the clock: firings strictly increase and
    /// none comes before its deadline.
    #[test]
    fn firings_strictly_increase_and_are_never_early(
        expression in prop::sample::select(vec![
            "*/7 * * * * *", "0 */5 * * * *", "30 2 * * *", "0 0 * * MON-FRI", "15,45 * * * *",
            "0 30 1 * * *", "@hourly", "0 0 L * *",
        ]),
        zone in prop::sample::select(vec!["UTC", "Europe/Berlin", "America/New_York", "Australia/Lord_Howe"]),
        start_offset in 0u64..(366 * 24 * 3600),
        steps in prop::collection::vec(1u64..(3 * 3600), 8),
    ) {
        let manual = Manual::start(1_735_689_600 + start_offset);
        manual.register(cron_timer("cron", expression, zone));
        let mut last = 0;
        for step in steps {
            manual.advance_to(manual.now_unix() + step * SECOND);
            while let Ok(expiration) = manual.fired.try_recv() {
                prop_assert!(expiration.deadline_unix > last, "not increasing");
                prop_assert!(expiration.fired_unix >= expiration.deadline_unix, "early");
                last = expiration.deadline_unix;
            }
            let next = manual.get("cron").expect("a cron timer stays pending").deadline_unix;
            prop_assert!(next > manual.now_unix(), "its next firing is in the past");
            prop_assert!(next > last);
        }
    }
}
