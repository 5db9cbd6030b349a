//! Deterministic tests of the calendar (leap days, month ends, nicknames, the day rule),
//! of the errors and zones, and the ignored micro-measurement.

use super::tests::{fires, schedule};
use super::*;

#[test]
fn leap_day_fires_only_in_leap_years() {
    assert_eq!(
        fires("0 0 29 2 *", "UTC", "2025-01-01T00:00:00Z", 2),
        ["2028-02-29T00:00:00+00:00", "2032-02-29T00:00:00+00:00"]
    );
    // 2100 is no leap year.
    assert_eq!(
        fires("0 0 29 2 *", "Europe/Berlin", "2097-01-01T00:00:00Z", 1),
        ["2104-02-29T00:00:00+01:00"]
    );
}

#[test]
fn last_day_of_the_month() {
    assert_eq!(
        fires("0 0 L * *", "UTC", "2024-01-15T00:00:00Z", 4),
        [
            "2024-01-31T00:00:00+00:00",
            "2024-02-29T00:00:00+00:00",
            "2024-03-31T00:00:00+00:00",
            "2024-04-30T00:00:00+00:00"
        ]
    );
    // The explicit range fires on each of those days that the month has.
    assert_eq!(
        fires("0 0 28-31 * *", "UTC", "2025-02-27T00:00:00Z", 4),
        [
            "2025-02-28T00:00:00+00:00",
            "2025-03-28T00:00:00+00:00",
            "2025-03-29T00:00:00+00:00",
            "2025-03-30T00:00:00+00:00"
        ]
    );
}

#[test]
fn nicknames_and_names() {
    assert_eq!(
        fires("@yearly", "Europe/Berlin", "2025-06-01T00:00:00Z", 2),
        ["2026-01-01T00:00:00+01:00", "2027-01-01T00:00:00+01:00"]
    );
    let from = "2025-06-04T12:00:00Z"; // a Wednesday
    for (nickname, plain) in [
        ("@annually", "0 0 1 1 *"),
        ("@monthly", "0 0 1 * *"),
        ("@WEEKLY", "0 0 * * 7"),
        ("@daily", "0 0 * * *"),
        ("@midnight", "0 0 ? * *"),
        ("@hourly", "0 0 * * * *"),
    ] {
        assert_eq!(
            fires(nickname, "UTC", from, 3),
            fires(plain, "UTC", from, 3)
        );
    }
    // Day of month OR day of week: every 13th and every Friday.
    assert_eq!(
        fires("0 0 13 jan fri", "UTC", "2025-01-01T00:00:00Z", 4),
        [
            "2025-01-03T00:00:00+00:00",
            "2025-01-10T00:00:00+00:00",
            "2025-01-13T00:00:00+00:00",
            "2025-01-17T00:00:00+00:00"
        ]
    );
}

fn error(expression: &str, zone: &str) -> ScheduleError {
    CalendarSchedule::parse(expression, zone).expect_err("must be refused")
}

#[test]
fn errors_name_the_field_and_position() {
    for (expression, position, token) in [
        ("0 0 32 * *", 3, "32"),
        ("* 24 * * *", 2, "24"),
        ("60 * * * * *", 1, "60"),
        ("0 0 * 13 *", 4, "13"),
        ("0 0 * * 8", 5, "8"),
        ("0 0 * MON *", 4, "MON"),
        ("0 0 * * JAN", 5, "JAN"),
        ("0 0 x * *", 3, "x"),
        ("0 0 * * +MON", 5, "+MON"),
        ("5-1 * * * *", 1, "5-1"),
        ("*/0 * * * *", 1, "*/0"),
        ("@reboot", 1, "@reboot"),
    ] {
        match error(expression, "UTC") {
            ScheduleError::Field {
                position: p,
                token: t,
                ..
            } => assert_eq!((p, t.as_str()), (position, token), "{expression}"),
            other => panic!("{expression}: {other:?}"),
        }
    }
    let message = error("0 0 32 * *", "UTC").to_string();
    assert!(
        message.starts_with("cron: field 3 (day of month) \"32\": "),
        "{message}"
    );
    assert_eq!(error("0 0 32 * *", "UTC").field(), "cron");
}

#[test]
fn errors_for_the_whole_expression() {
    for expression in ["", "   ", "* * * *", "0 0 0 1 1 * 2030", "0 0 30 2 *"] {
        assert!(
            matches!(error(expression, "UTC"), ScheduleError::Expression { .. }),
            "{expression}"
        );
    }
    assert!(error("* * * *", "UTC").to_string().contains("found 4"));
    assert!(error("0 0 31 4,6,9,11 *", "UTC")
        .to_string()
        .contains("never fires"));
}

#[test]
fn time_zones() {
    let unknown = error("* * * * *", "Mars/Olympus");
    assert_eq!(unknown.field(), "time_zone");
    assert_eq!(
        unknown.to_string(),
        "time_zone: unknown IANA time zone \"Mars/Olympus\""
    );
    assert_eq!(error("* * * * *", "Etc/Unknown").field(), "time_zone");
    assert_eq!(schedule("* * * * *", "").time_zone(), "UTC");
    let berlin = schedule(" 30 2 * * * ", "europe/berlin");
    assert_eq!(berlin.time_zone(), "Europe/Berlin");
    assert_eq!(berlin.expression(), "30 2 * * *");
    // A release name such as "2025b": four digits and a letter.
    let version = time_zone_database_version();
    assert!(
        version.len() == 5 && version[..4].chars().all(|c| c.is_ascii_digit()),
        "{version}"
    );
}

/// `cargo test --release --lib cron -- --ignored --nocapture`
#[test]
#[ignore = "a measurement, not a check"]
fn measure_next_after() {
    for measurement in measure::measure_next_after(200_000) {
        println!("{measurement}");
    }
}
