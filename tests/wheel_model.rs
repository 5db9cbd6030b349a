//! Model-based test of `tickd::wheel::Wheel` against a `BTreeMap<(deadline, seq), id>` reference.
//!
//! Random interleavings of insert, cancel, reschedule and clock advances are applied to both; after
//! every advance the fired batch must be sorted by deadline and, as a multiset, exactly the model's
//! due set, which covers "never early", "less than one tick late", "none lost or duplicated" and
//! "sorted batch". The order among equal deadlines is unspecified, so it is not compared.
//! Staging budgets as small as one timer per advance leave cascades half prepared while
//! timers are inserted, cancelled and rescheduled around them.

use std::collections::{BTreeMap, HashMap};

use proptest::prelude::*;
use tickd::wheel::{Expired, Handle, Wheel};

/// How a deadline is derived from the wheel's current time.
#[derive(Clone, Debug)]
enum DeadlineChoice {
    /// `now + delay`, the common case.
    Ahead(u64),
    /// `now - back`, already due.
    Behind(u64),
    /// Far beyond the wheel's span (clamped timers).
    Huge(u64),
    /// `u64::MAX` itself.
    Max,
}

#[derive(Clone, Debug)]
enum Operation {
    Insert(DeadlineChoice),
    /// Cancel the `n % known`-th handle ever issued, fired or not.
    Cancel(usize),
    Reschedule(usize, DeadlineChoice),
    Advance(u64),
    /// Advance to `u64::MAX`, after which the clock is pinned.
    AdvanceToEnd,
}

fn deadline_choice() -> impl Strategy<Value = DeadlineChoice> {
    prop_oneof![
        8 => (0u64..5000).prop_map(DeadlineChoice::Ahead),
        1 => (0u64..5000).prop_map(DeadlineChoice::Behind),
        1 => (1u64 << 40..1u64 << 63).prop_map(DeadlineChoice::Huge),
        1 => Just(DeadlineChoice::Max),
    ]
}

fn operation() -> impl Strategy<Value = Operation> {
    prop_oneof![
        30 => deadline_choice().prop_map(Operation::Insert),
        6 => any::<usize>().prop_map(Operation::Cancel),
        6 => (any::<usize>(), deadline_choice()).prop_map(|(pick, choice)| Operation::Reschedule(pick, choice)),
        12 => (0u64..2000).prop_map(Operation::Advance),
        3 => (0u64..1u64 << 50).prop_map(Operation::Advance),
        1 => (1u64 << 50..1u64 << 62).prop_map(Operation::Advance),
        1 => Just(Operation::AdvanceToEnd),
    ]
}

/// One pending timer in the model.
#[derive(Clone, Copy, Debug)]
struct ModelTimer {
    deadline: u64,
    /// Unique number keeping model keys distinct; a reschedule takes a fresh one.
    seq: u64,
    /// Inserted or rescheduled with a deadline at or before `now()`: fires on the next advance.
    due_at_once: bool,
}

struct Harness {
    wheel: Wheel<u64>,
    tick: u64,
    /// Pending timers keyed by the value stored in the wheel (a unique id).
    pending: HashMap<u64, ModelTimer>,
    /// Every handle ever issued, with its id, so cancels can target fired ones too.
    issued: Vec<(Handle, u64)>,
    next_seq: u64,
}

impl Harness {
    fn new(tick: u64, staging_budget: usize) -> Self {
        let mut wheel = Wheel::new(tick, usize::MAX);
        wheel.set_staging_budget(staging_budget);
        Harness {
            wheel,
            tick,
            pending: HashMap::new(),
            issued: Vec::new(),
            next_seq: 0,
        }
    }

    fn deadline_from(&self, choice: &DeadlineChoice) -> u64 {
        let now = self.wheel.now();
        match *choice {
            DeadlineChoice::Ahead(delay) => now.saturating_add(delay),
            DeadlineChoice::Behind(back) => now.saturating_sub(back),
            DeadlineChoice::Huge(delay) => now.saturating_add(delay),
            DeadlineChoice::Max => u64::MAX,
        }
    }

    fn model_timer(&mut self, deadline: u64) -> ModelTimer {
        self.next_seq += 1;
        ModelTimer {
            deadline,
            seq: self.next_seq,
            due_at_once: deadline <= self.wheel.now(),
        }
    }

    fn apply(&mut self, operation: &Operation) -> Result<(), TestCaseError> {
        match operation {
            Operation::Insert(choice) => self.insert(choice),
            Operation::Cancel(pick) => self.cancel(*pick)?,
            Operation::Reschedule(pick, choice) => self.reschedule(*pick, choice)?,
            Operation::Advance(step) => self.advance(self.wheel.now().saturating_add(*step))?,
            Operation::AdvanceToEnd => self.advance(u64::MAX)?,
        }
        prop_assert_eq!(self.wheel.len(), self.pending.len());
        self.check_next_expiration()
    }

    fn insert(&mut self, choice: &DeadlineChoice) {
        let deadline = self.deadline_from(choice);
        let id = self.next_seq;
        let timer = self.model_timer(deadline);
        let handle = self.wheel.insert(deadline, id).expect("no limit");
        self.pending.insert(id, timer);
        self.issued.push((handle, id));
    }

    fn pick(&self, pick: usize) -> Option<(Handle, u64)> {
        if self.issued.is_empty() {
            return None;
        }
        Some(self.issued[pick % self.issued.len()])
    }

    fn cancel(&mut self, pick: usize) -> Result<(), TestCaseError> {
        let Some((handle, id)) = self.pick(pick) else {
            return Ok(());
        };
        let expected = self.pending.remove(&id).map(|_| id);
        prop_assert_eq!(self.wheel.cancel(handle), expected);
        Ok(())
    }

    fn reschedule(&mut self, pick: usize, choice: &DeadlineChoice) -> Result<(), TestCaseError> {
        let Some((handle, id)) = self.pick(pick) else {
            return Ok(());
        };
        let deadline = self.deadline_from(choice);
        let was_pending = self.pending.contains_key(&id);
        prop_assert_eq!(self.wheel.reschedule(handle, deadline), was_pending);
        if was_pending {
            let timer = self.model_timer(deadline);
            self.pending.insert(id, timer);
            prop_assert_eq!(self.wheel.get(handle), Some((deadline, &id)));
        } else {
            prop_assert_eq!(self.wheel.get(handle), None);
        }
        Ok(())
    }

    fn deadline_tick(&self, deadline: u64) -> u64 {
        deadline.div_ceil(self.tick)
    }

    fn advance(&mut self, now: u64) -> Result<(), TestCaseError> {
        let effective_now = now.max(self.wheel.now());
        let now_tick = effective_now / self.tick;
        let mut due: BTreeMap<(u64, u64), u64> = BTreeMap::new();
        for (&id, timer) in &self.pending {
            if timer.due_at_once || self.deadline_tick(timer.deadline) <= now_tick {
                due.insert((timer.deadline, timer.seq), id);
            }
        }
        let mut expired: Vec<Expired<u64>> = Vec::new();
        self.wheel.advance(now, &mut expired);
        prop_assert_eq!(self.wheel.now(), effective_now);

        let fired_deadlines: Vec<u64> = expired.iter().map(|fired| fired.deadline).collect();
        prop_assert!(
            fired_deadlines.windows(2).all(|pair| pair[0] <= pair[1]),
            "batch not sorted by deadline at now {}: {:?}",
            effective_now,
            fired_deadlines
        );
        let mut fired: Vec<(u64, u64)> = expired
            .iter()
            .map(|fired| (fired.deadline, fired.value))
            .collect();
        fired.sort_unstable();
        let mut expected: Vec<(u64, u64)> = due
            .iter()
            .map(|(&(deadline, _), &id)| (deadline, id))
            .collect();
        expected.sort_unstable();
        prop_assert_eq!(&fired, &expected, "batch differs at now {}", effective_now);
        for fired in &expired {
            prop_assert!(fired.deadline <= effective_now, "fired early");
            let timer = self
                .pending
                .remove(&fired.value)
                .expect("fired a pending timer");
            prop_assert_eq!(fired.deadline, timer.deadline);
            let issued = self
                .issued
                .iter()
                .any(|&(handle, id)| handle == fired.handle && id == fired.value);
            prop_assert!(issued, "fired with the wrong handle");
        }
        // Less than one tick late: everything still pending belongs to a future tick.
        let still_pending_ok = self
            .pending
            .values()
            .all(|timer| self.deadline_tick(timer.deadline) > now_tick);
        prop_assert!(still_pending_ok);
        Ok(())
    }

    fn check_next_expiration(&self) -> Result<(), TestCaseError> {
        let next = self.wheel.next_expiration();
        if self.pending.is_empty() {
            prop_assert_eq!(next, None);
            return Ok(());
        }
        let next = next.expect("pending timers need a next expiration");
        let now = self.wheel.now();
        if self.pending.values().any(|timer| timer.due_at_once) {
            prop_assert!(next <= now);
            return Ok(());
        }
        // Work may start earlier (a cascade), but never after the earliest timer's tick begins.
        let earliest_fire = self
            .pending
            .values()
            .map(|timer| self.deadline_tick(timer.deadline).saturating_mul(self.tick))
            .min()
            .expect("non-empty");
        // At `now == u64::MAX` the clock is pinned and the answer saturates to it.
        prop_assert!(
            next > now || now == u64::MAX,
            "nothing due yet: next {} now {}",
            next,
            now
        );
        prop_assert!(
            next <= earliest_fire,
            "next {} after earliest {}",
            next,
            earliest_fire
        );
        Ok(())
    }

    fn finish(mut self) -> Result<(), TestCaseError> {
        let mut expected: Vec<(u64, u64)> = self
            .pending
            .values()
            .map(|timer| (timer.deadline, timer.seq))
            .collect();
        expected.sort_unstable();
        let drained: Vec<u64> = self
            .wheel
            .drain()
            .into_iter()
            .map(|fired| fired.deadline)
            .collect();
        let expected_deadlines: Vec<u64> =
            expected.into_iter().map(|(deadline, _)| deadline).collect();
        prop_assert_eq!(drained, expected_deadlines);
        prop_assert!(self.wheel.is_empty());
        self.pending.clear();
        Ok(())
    }
}

proptest! {
    // No failure persistence: the test must not write regression files into the source tree.
    #![proptest_config(ProptestConfig {
        cases: 256,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn wheel_matches_reference_model(
        tick in prop_oneof![Just(1u64), Just(3u64), Just(1000u64)],
        staging_budget in prop_oneof![Just(1usize), Just(3usize), Just(1024usize)],
        operations in prop::collection::vec(operation(), 1..300),
    ) {
        let mut harness = Harness::new(tick, staging_budget);
        for operation in &operations {
            harness.apply(operation)?;
        }
        let listed = harness.wheel.iter().count();
        prop_assert_eq!(listed, harness.pending.len());
        for (handle, deadline, &id) in harness.wheel.iter() {
            prop_assert_eq!(harness.pending.get(&id).map(|timer| timer.deadline), Some(deadline));
            prop_assert_eq!(harness.wheel.get(handle), Some((deadline, &id)));
        }
        harness.finish()?;
    }
}
