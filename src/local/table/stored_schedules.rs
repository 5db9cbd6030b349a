//! The cron schedules recovery reads back, parsed once each.
//!
//! A log of cron timers is mostly their schedules written out again: every firing,
//! reschedule and snapshot logs the whole timer, and the unsettled firings carry it too.
//! Parsing one (croner's parse, then the day masks [`crate::cron`] builds from it) costs
//! far more than the rest of a record's replay, and most timers share a few schedules, so
//! recovery parses each distinct expression and zone once and shares the schedule (as
//! [`Calendar`] is shared anyway). A schedule is a pure function of the two strings.

use rustc_hash::FxHashMap;

use crate::domain::Calendar;

/// The schedules parsed so far, by time zone and then expression as stored. Only what
/// parsed is kept: a schedule that no longer parses warns at each record, as before.
#[derive(Default)]
pub(super) struct StoredSchedules {
    by_zone: FxHashMap<String, FxHashMap<String, Calendar>>,
}

impl StoredSchedules {
    /// [`Calendar::stored`], parsed only the first time these two strings are seen.
    pub(super) fn stored(&mut self, cron: &str, time_zone: &str) -> Option<Calendar> {
        let known = self
            .by_zone
            .get(time_zone)
            .and_then(|by_expression| by_expression.get(cron));
        if let Some(calendar) = known {
            return Some(calendar.clone());
        }
        let calendar = Calendar::stored(cron, time_zone)?;
        self.keep(cron, time_zone, calendar.clone());
        Some(calendar)
    }

    /// Adds a schedule parsed elsewhere, under the expression and zone it is logged with.
    #[cfg(any(test, feature = "sim"))]
    pub(super) fn know(&mut self, calendar: Calendar) {
        self.keep(
            calendar.expression(),
            calendar.time_zone(),
            calendar.clone(),
        );
    }

    fn keep(&mut self, cron: &str, time_zone: &str, calendar: Calendar) {
        self.by_zone
            .entry(time_zone.to_owned())
            .or_default()
            .insert(cron.to_owned(), calendar);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    #[test]
    fn one_parse_per_expression_and_zone() {
        let mut schedules = StoredSchedules::default();
        let first = schedules.stored("*/5 * * * *", "Europe/Berlin").unwrap();
        let again = schedules.stored("*/5 * * * *", "Europe/Berlin").unwrap();
        assert!(Arc::ptr_eq(&first.0, &again.0));
        let elsewhere = schedules.stored("*/5 * * * *", "UTC").unwrap();
        assert!(!Arc::ptr_eq(&first.0, &elsewhere.0));
        assert_eq!(elsewhere.time_zone(), "UTC");
        assert!(schedules.stored("", "UTC").is_none());
        assert!(schedules
            .stored("*/5 * * * *", "Nowhere/Atlantis")
            .is_none());
    }
}
