//! Deterministic tests of the DST rules in Europe/Berlin and America/New_York, both ways,
//! for daily, hourly, every-minute and every-second schedules (the calendar and the
//! errors are in `tests_calendar.rs`). 2025's changes: Berlin 30 March 02:00 CET → 03:00
//! CEST and 26 October 03:00 CEST → 02:00 CET; New York 9 March 02:00 EST → 03:00 EDT
//! and 2 November 02:00 EDT → 01:00 EST.

use super::*;
use jiff::tz::TimeZoneDatabase;
use jiff::Timestamp;

pub(super) const NS: u64 = 1_000_000_000;

/// The instant of an RFC 3339 time, in nanoseconds.
pub(super) fn at(rfc3339: &str) -> u64 {
    let ts: Timestamp = rfc3339.parse().expect("a valid test instant");
    u64::try_from(ts.as_second()).unwrap() * NS
}

pub(super) fn schedule(expression: &str, zone: &str) -> CalendarSchedule {
    CalendarSchedule::parse(expression, zone).expect("a valid test schedule")
}

/// The first `count` firings after `from`, as local times with their offsets.
pub(super) fn fires(expression: &str, zone: &str, from: &str, count: usize) -> Vec<String> {
    let schedule = schedule(expression, zone);
    let tz = TimeZoneDatabase::bundled().get(zone).unwrap();
    let mut after = at(from);
    (0..count)
        .map(|_| {
            after = schedule.next_after(after).expect("fires again");
            let ts = Timestamp::from_second((after / NS) as i64).unwrap();
            ts.to_zoned(tz.clone())
                .strftime("%Y-%m-%dT%H:%M:%S%:z")
                .to_string()
        })
        .collect()
}

/// Every firing of `expression` from `from` for `span` seconds is one `step` after the
/// previous: no real instant is skipped or fired twice.
fn assert_every_real(expression: &str, zone: &str, from: &str, step: u64, span: u64) {
    let schedule = schedule(expression, zone);
    let mut previous = schedule.next_after(at(from)).unwrap();
    for _ in 0..span / step {
        let next = schedule.next_after(previous).unwrap();
        assert_eq!(
            next - previous,
            step * NS,
            "{expression} in {zone} after {previous}"
        );
        previous = next;
    }
}

#[test]
fn daily_in_a_spring_gap_fires_at_the_end_of_the_gap() {
    assert_eq!(
        fires(
            "30 2 * * *",
            "Europe/Berlin",
            "2025-03-29T00:00:00+01:00",
            3
        ),
        [
            "2025-03-29T02:30:00+01:00",
            "2025-03-30T03:00:00+02:00",
            "2025-03-31T02:30:00+02:00"
        ]
    );
    assert_eq!(
        fires(
            "30 2 * * *",
            "America/New_York",
            "2025-03-08T12:00:00-05:00",
            3
        ),
        [
            "2025-03-09T03:00:00-04:00",
            "2025-03-10T02:30:00-04:00",
            "2025-03-11T02:30:00-04:00"
        ]
    );
    // Several gap times collapse into the one firing at the change.
    assert_eq!(
        fires(
            "0,20,40 2 * * *",
            "Europe/Berlin",
            "2025-03-30T01:59:00+01:00",
            2
        ),
        ["2025-03-30T03:00:00+02:00", "2025-03-31T02:00:00+02:00"]
    );
}

#[test]
fn daily_in_a_repeated_hour_fires_once_at_the_first_occurrence() {
    assert_eq!(
        fires(
            "30 2 * * *",
            "Europe/Berlin",
            "2025-10-25T00:00:00+02:00",
            3
        ),
        [
            "2025-10-25T02:30:00+02:00",
            "2025-10-26T02:30:00+02:00",
            "2025-10-27T02:30:00+01:00"
        ]
    );
    assert_eq!(
        fires(
            "30 1 * * *",
            "America/New_York",
            "2025-11-01T12:00:00-04:00",
            2
        ),
        ["2025-11-02T01:30:00-04:00", "2025-11-03T01:30:00-05:00"]
    );
    // Asked during the repeat, after the first 02:30 passed: the next day, not 02:30 CET.
    for from in ["2025-10-26T02:40:00+02:00", "2025-10-26T02:10:00+01:00"] {
        assert_eq!(
            fires("30 2 * * *", "Europe/Berlin", from, 1),
            ["2025-10-27T02:30:00+01:00"]
        );
    }
}

#[test]
fn hourly_follows_real_hours_through_both_changes() {
    assert_eq!(
        fires("@hourly", "Europe/Berlin", "2025-03-30T00:30:00+01:00", 3),
        [
            "2025-03-30T01:00:00+01:00",
            "2025-03-30T03:00:00+02:00",
            "2025-03-30T04:00:00+02:00"
        ]
    );
    assert_eq!(
        fires("0 * * * *", "Europe/Berlin", "2025-10-26T01:30:00+02:00", 3),
        [
            "2025-10-26T02:00:00+02:00",
            "2025-10-26T02:00:00+01:00",
            "2025-10-26T03:00:00+01:00"
        ]
    );
    // `0-23` and `*/1` are every hour too, so the same rule applies.
    for every_hour in ["0 0-23 * * *", "0 */1 * * *"] {
        assert_eq!(
            fires(every_hour, "Europe/Berlin", "2025-10-26T01:30:00+02:00", 3),
            fires("0 * * * *", "Europe/Berlin", "2025-10-26T01:30:00+02:00", 3)
        );
    }
    // A minute in the skipped hour does not fire at the change (an hour apart, as ever).
    assert_eq!(
        fires(
            "30 * * * *",
            "America/New_York",
            "2025-03-09T01:00:00-05:00",
            2
        ),
        ["2025-03-09T01:30:00-05:00", "2025-03-09T03:30:00-04:00"]
    );
    for zone in ["Europe/Berlin", "America/New_York"] {
        let (spring, fall) = if zone == "Europe/Berlin" {
            ("2025-03-29T22:00:00Z", "2025-10-25T22:00:00Z")
        } else {
            ("2025-03-09T03:00:00Z", "2025-11-02T02:00:00Z")
        };
        assert_every_real("0 * * * *", zone, spring, 3_600, 8 * 3_600);
        assert_every_real("0 * * * *", zone, fall, 3_600, 8 * 3_600);
    }
}

#[test]
fn every_minute_fires_at_every_real_minute_through_both_changes() {
    assert_eq!(
        fires("* * * * *", "Europe/Berlin", "2025-10-26T02:58:30+02:00", 3),
        [
            "2025-10-26T02:59:00+02:00",
            "2025-10-26T02:00:00+01:00",
            "2025-10-26T02:01:00+01:00"
        ]
    );
    assert_eq!(
        fires(
            "* * * * *",
            "America/New_York",
            "2025-03-09T01:58:30-05:00",
            3
        ),
        [
            "2025-03-09T01:59:00-05:00",
            "2025-03-09T03:00:00-04:00",
            "2025-03-09T03:01:00-04:00"
        ]
    );
    for (zone, from) in [
        ("Europe/Berlin", "2025-03-29T23:30:00Z"),
        ("Europe/Berlin", "2025-10-25T23:30:00Z"),
        ("America/New_York", "2025-03-09T05:30:00Z"),
        ("America/New_York", "2025-11-02T04:30:00Z"),
    ] {
        assert_every_real("* * * * *", zone, from, 60, 3 * 3_600);
    }
}

#[test]
fn a_minute_schedule_pinned_to_an_hour_follows_the_wall_clock() {
    // Every minute of 02:xx: the whole skipped hour fires once, at the change ...
    assert_eq!(
        fires("* 2 * * *", "Europe/Berlin", "2025-03-30T01:59:00+01:00", 2),
        ["2025-03-30T03:00:00+02:00", "2025-03-31T02:00:00+02:00"]
    );
    // ... and the repeated hour fires in its first occurrence only.
    assert_eq!(
        fires("* 2 * * *", "Europe/Berlin", "2025-10-26T02:58:30+02:00", 2),
        ["2025-10-26T02:59:00+02:00", "2025-10-27T02:00:00+01:00"]
    );
}

#[test]
fn every_second_fires_on_whole_seconds_through_both_changes() {
    let schedule = schedule("*/1 * * * * *", "Europe/Berlin");
    let whole = at("2025-03-30T00:59:59Z");
    assert_eq!(schedule.next_after(whole - 1), Some(whole));
    assert_eq!(schedule.next_after(whole), Some(whole + NS));
    assert_eq!(schedule.next_after(whole + NS / 2), Some(whole + NS));
    assert_eq!(schedule.next_at_or_after(whole), Some(whole));
    assert_eq!(schedule.next_at_or_after(whole + 1), Some(whole + NS));
    for from in ["2025-03-30T00:59:00Z", "2025-10-26T00:59:00Z"] {
        assert_every_real("*/1 * * * * *", "Europe/Berlin", from, 1, 180);
    }
}
