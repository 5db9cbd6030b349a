//! [`CalendarSchedule`]: a cron expression parsed once, in the IANA zone it is read in,
//! and the next instant it fires after a given one (whole seconds, never earlier than
//! asked). The module docs say which DST rule a schedule follows; `zone` applies it.

use jiff::tz::{TimeZone, TimeZoneDatabase};

use super::civil::CivilMatcher;
use super::expression::{self, ScheduleError};
use super::zone;

const NANOS_PER_SECOND: u64 = 1_000_000_000;

/// A parsed cron expression in a time zone. Cloning shares the zone's data.
#[derive(Clone, Debug)]
pub struct CalendarSchedule {
    expression: String,
    time_zone_name: String,
    /// Read by the property tests, which check the DST rule it chooses.
    pub(super) matcher: CivilMatcher,
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
