//! Tests of the wheel's behaviour through its own interface: firing times, handles, limits,
//! ordering, long jumps and draining. Staging, a level's bitmap, the list pool and the slab
//! have their own tests beside their code.

use super::geometry::WHEEL_SPAN_TICKS;
use super::lists::RETAINED_CAPACITY_FLOOR;
use super::*;

/// Advances to `now` and returns the fired batch as (deadline, value) pairs, in firing order.
pub(crate) fn advance_collect(wheel: &mut Wheel<u32>, now: u64) -> Vec<(u64, u32)> {
    let mut expired = Vec::new();
    wheel.advance(now, &mut expired);
    expired
        .into_iter()
        .map(|fired| (fired.deadline, fired.value))
        .collect()
}

#[test]
fn handle_round_trips_through_u64() {
    let handle = Handle {
        index: 7,
        generation: 0xdead_beef,
    };
    assert_eq!(Handle::from_u64(handle.to_u64()), handle);
}

#[test]
fn zero_and_past_deadlines_fire_on_next_advance() {
    let mut wheel = Wheel::new(1000, 16);
    wheel.insert(0, 1).unwrap();
    assert_eq!(wheel.next_expiration(), Some(0));
    assert_eq!(advance_collect(&mut wheel, 0), vec![(0, 1)]);

    assert!(advance_collect(&mut wheel, 1500).is_empty());
    wheel.insert(1200, 2).unwrap();
    wheel.insert(0, 3).unwrap();
    assert!(wheel.next_expiration().unwrap() <= wheel.now());
    // Time going back is treated as no time passing; the due timers still fire, in order.
    assert_eq!(advance_collect(&mut wheel, 10), vec![(0, 3), (1200, 2)]);
    assert!(wheel.is_empty());
    assert_eq!(wheel.now(), 1500);
}

#[test]
fn never_fires_before_its_tick() {
    let mut wheel = Wheel::new(10, 16);
    wheel.insert(25, 1).unwrap();
    assert!(advance_collect(&mut wheel, 29).is_empty());
    assert_eq!(wheel.next_expiration(), Some(30));
    assert_eq!(advance_collect(&mut wheel, 30), vec![(25, 1)]);
}

#[test]
fn max_deadline_and_far_future_fire_exactly_when_due() {
    let mut wheel = Wheel::new(1, 16);
    let far = 5 * WHEEL_SPAN_TICKS + 12_345;
    wheel.insert(u64::MAX, 1).unwrap();
    wheel.insert(far, 2).unwrap();
    // Several clamped re-checks, both stepped and jumped.
    for now in [
        WHEEL_SPAN_TICKS / 2,
        WHEEL_SPAN_TICKS,
        3 * WHEEL_SPAN_TICKS,
        far - 1,
    ] {
        assert!(
            advance_collect(&mut wheel, now).is_empty(),
            "early at {now}"
        );
        assert!(wheel.next_expiration().unwrap() <= far);
    }
    assert_eq!(advance_collect(&mut wheel, far), vec![(far, 2)]);
    assert!(advance_collect(&mut wheel, u64::MAX - 1).is_empty());
    assert_eq!(wheel.next_expiration(), Some(u64::MAX));
    assert_eq!(advance_collect(&mut wheel, u64::MAX), vec![(u64::MAX, 1)]);
    assert_eq!(wheel.next_expiration(), None);
}

#[test]
fn clamped_timer_survives_small_steps() {
    let mut wheel = Wheel::new(1, 4);
    let deadline = WHEEL_SPAN_TICKS + 100;
    wheel.insert(deadline, 1).unwrap();
    let mut now = 0;
    while let Some(next) = wheel.next_expiration() {
        assert!(next > now);
        now = next;
        let fired = advance_collect(&mut wheel, now);
        if !fired.is_empty() {
            assert_eq!(fired, vec![(deadline, 1)]);
            assert_eq!(now, deadline);
        }
    }
    assert_eq!(now, deadline);
}

#[test]
fn stale_handle_does_not_touch_reused_slot() {
    let mut wheel = Wheel::new(1, 16);
    let old = wheel.insert(100, 1).unwrap();
    assert_eq!(wheel.cancel(old), Some(1));
    let new = wheel.insert(200, 2).unwrap();
    assert_ne!(old, new);
    assert_eq!(wheel.cancel(old), None);
    assert!(!wheel.reschedule(old, 5));
    assert_eq!(wheel.get(old), None);
    assert!(wheel.get_mut(old).is_none());
    assert_eq!(wheel.get(new), Some((200, &2)));
    assert_eq!(advance_collect(&mut wheel, 200), vec![(200, 2)]);
}

#[test]
fn max_pending_rejects_then_recovers_after_cancel() {
    let mut wheel = Wheel::new(1, 2);
    let first = wheel.insert(10, 1).unwrap();
    wheel.insert(20, 2).unwrap();
    assert_eq!(wheel.insert(30, 3), Err(WheelFull { limit: 2 }));
    assert_eq!(wheel.len(), 2);
    wheel.cancel(first).unwrap();
    wheel.insert(30, 3).unwrap();
    assert_eq!(wheel.len(), 2);
}

#[test]
fn cancel_after_fire_returns_none() {
    let mut wheel = Wheel::new(1, 4);
    let handle = wheel.insert(5, 1).unwrap();
    let mut expired = Vec::new();
    wheel.advance(5, &mut expired);
    assert_eq!(expired[0].handle, handle);
    assert_eq!(wheel.cancel(handle), None);
    assert!(!wheel.reschedule(handle, 50));
}

/// Like `advance_collect`, with equal deadlines ordered by value (their relative order is
/// unspecified), after checking that the batch is sorted by deadline.
fn advance_collect_normalized(wheel: &mut Wheel<u32>, now: u64) -> Vec<(u64, u32)> {
    let mut fired = advance_collect(wheel, now);
    assert!(fired.windows(2).all(|pair| pair[0].0 <= pair[1].0));
    fired.sort_unstable();
    fired
}

#[test]
fn same_tick_timers_fire_in_deadline_order() {
    let mut wheel = Wheel::new(1000, 16);
    wheel.insert(1900, 1).unwrap();
    wheel.insert(1100, 2).unwrap();
    wheel.insert(1500, 3).unwrap();
    wheel.insert(1100, 4).unwrap();
    assert_eq!(
        advance_collect_normalized(&mut wheel, 2000),
        vec![(1100, 2), (1100, 4), (1500, 3), (1900, 1)]
    );
}

#[test]
fn equal_deadlines_from_different_levels_fire_together() {
    let mut wheel = Wheel::new(1, 16);
    wheel.insert(5000, 1).unwrap(); // placed at level 2
    advance_collect(&mut wheel, 4990);
    wheel.insert(5000, 2).unwrap(); // placed after 1 has cascaded
    wheel.insert(4995, 3).unwrap();
    assert_eq!(
        advance_collect_normalized(&mut wheel, 6000),
        vec![(4995, 3), (5000, 1), (5000, 2)]
    );
}

#[test]
fn cancel_from_the_middle_of_a_slot_keeps_the_others() {
    let mut wheel = Wheel::new(1, 64);
    // Same level-1 slot: cancel moves the last timer into the freed position.
    let handles: Vec<Handle> = (0..10)
        .map(|value| wheel.insert(100 + u64::from(value), value).unwrap())
        .collect();
    assert_eq!(wheel.cancel(handles[3]), Some(3));
    assert_eq!(wheel.cancel(handles[0]), Some(0));
    assert_eq!(wheel.cancel(handles[9]), Some(9));
    assert!(wheel.reschedule(handles[5], 50));
    assert!(wheel.reschedule(handles[1], 30));
    assert_eq!(wheel.cancel(handles[1]), Some(1));
    assert_eq!(wheel.get(handles[8]), Some((108, &8)));
    assert_eq!(advance_collect(&mut wheel, 50), vec![(50, 5)]);
    assert_eq!(
        advance_collect(&mut wheel, 200),
        vec![(102, 2), (104, 4), (106, 6), (107, 7), (108, 8)]
    );
    assert!(wheel.is_empty());
}

#[test]
fn slot_vectors_keep_modest_allocations_across_rotations() {
    let mut wheel = Wheel::new(1, 1 << 16);
    for round in 0..3u64 {
        let base = wheel.now() + 64;
        for value in 0..5000u32 {
            wheel
                .insert(base + 70 + u64::from(value) % 50, value)
                .unwrap();
        }
        let mut expired = Vec::new();
        wheel.advance(base + 200, &mut expired);
        assert_eq!(expired.len(), 5000, "round {round}");
        assert!(wheel.is_empty());
    }
    let largest = |wheel: &Wheel<u32>| wheel.lists.largest_capacity();
    assert!(
        largest(&wheel) >= 4096,
        "the cascaded slot kept its allocation"
    );
    // A small load afterwards shrinks the big vectors the next time their slot is processed.
    for _ in 0..300 {
        wheel.insert(wheel.now() + 70, 1).unwrap();
        let mut expired = Vec::new();
        wheel.advance(wheel.now() + 64, &mut expired);
    }
    let retained = largest(&wheel);
    assert!(retained <= RETAINED_CAPACITY_FLOOR, "retained {retained}");
}

#[test]
fn next_expiration_is_none_when_empty() {
    let mut wheel: Wheel<u32> = Wheel::new(1, 4);
    assert_eq!(wheel.next_expiration(), None);
    let handle = wheel.insert(70, 1).unwrap();
    // Level 1: work (a cascade) starts at the slot start, not later than the deadline.
    assert_eq!(wheel.next_expiration(), Some(64));
    wheel.cancel(handle);
    assert_eq!(wheel.next_expiration(), None);
}

#[test]
fn catches_up_after_a_long_jump() {
    let mut wheel = Wheel::new(1, 1024);
    let deadlines = [1, 63, 64, 4095, 4096, 1 << 20, (1 << 30) + 7, 1 << 41];
    for (value, &deadline) in deadlines.iter().enumerate() {
        wheel.insert(deadline, value as u32).unwrap();
    }
    wheel.insert(1 << 50, 99).unwrap();
    let fired = advance_collect(&mut wheel, 1 << 42);
    let expected: Vec<(u64, u32)> = deadlines
        .iter()
        .enumerate()
        .map(|(value, &deadline)| (deadline, value as u32))
        .collect();
    assert_eq!(fired, expected);
    assert_eq!(wheel.len(), 1);
    assert_eq!(advance_collect(&mut wheel, 1 << 50), vec![(1 << 50, 99)]);
}

#[test]
fn reschedule_earlier_and_later_keeps_handle() {
    let mut wheel = Wheel::new(10, 4);
    let early = wheel.insert(5000, 1).unwrap();
    let late = wheel.insert(50, 2).unwrap();
    assert!(wheel.reschedule(early, 30));
    assert!(wheel.reschedule(late, 100_000));
    assert_eq!(wheel.get(early), Some((30, &1)));
    let mut expired = Vec::new();
    wheel.advance(5000, &mut expired);
    assert_eq!(expired.len(), 1);
    assert_eq!(expired[0].handle, early);
    assert!(advance_collect(&mut wheel, 99_999).is_empty());
    assert_eq!(advance_collect(&mut wheel, 100_000), vec![(100_000, 2)]);
}

#[test]
fn drain_returns_everything_sorted() {
    let mut wheel = Wheel::new(1, 16);
    for (value, deadline) in [(1, 1 << 45), (2, 0), (3, 70), (4, 5)] {
        wheel.insert(deadline, value).unwrap();
    }
    if let Some((_, value)) = wheel.get_mut(Handle::from_u64(0)) {
        *value = 10;
    }
    assert_eq!(wheel.iter().count(), 4);
    let drained: Vec<(u64, u32)> = wheel
        .drain()
        .into_iter()
        .map(|fired| (fired.deadline, fired.value))
        .collect();
    assert_eq!(drained, vec![(0, 2), (5, 4), (70, 3), (1 << 45, 10)]);
    assert!(wheel.is_empty());
    assert_eq!(wheel.next_expiration(), None);
}
