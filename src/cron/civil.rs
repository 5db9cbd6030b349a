//! The forward search in civil time, on bit masks taken from croner's parsed pattern.
//!
//! croner's own `find_next_occurrence` costs 0.6-2.3 µs a call (release, measured:
//! it walks a cursor through hours and days, checking each), about what a whole timer
//! registration costs on the worker. The masks below answer the same question in tens
//! of nanoseconds: the next set bit of each field, with no calendar type in between.
//! croner still decides what every field means: the masks are filled by asking its
//! `*_match` functions once per value at parse time (the proptests check the two agree).
//!
//! Wall times are "local seconds": seconds since 1970-01-01T00:00:00 of the wall clock,
//! as if the zone were UTC, so they order and add like instants.

use croner::{Cron, Weekday};

const SECONDS_PER_DAY: i64 = 86_400;
/// A bound on the months one search looks at: 400 years is a full Gregorian cycle, and
/// parsing refuses expressions no day in it matches, so this is never reached.
const MAX_MONTHS: usize = 400 * 12;

#[derive(Clone, Debug)]
pub(super) struct CivilMatcher {
    seconds: u64,
    minutes: u64,
    hours: u32,
    /// Bit `m` for month `m` (1-12).
    months: u16,
    /// Bit `d` for each matching day `d` of a month `28 + i` days long whose first day
    /// is weekday `w` (0 Sunday): what `L`, `W`, `#` and the weekday field depend on.
    days: [[u32; 7]; 4],
}

impl CivilMatcher {
    pub(super) fn new(cron: &Cron) -> Self {
        let pattern = &cron.pattern;
        let mask = |count: u32, matches: &dyn Fn(u32) -> bool| {
            (0..count).fold(0u64, |mask, value| {
                mask | (u64::from(matches(value)) << value)
            })
        };
        let mut days = [[0u32; 7]; 4];
        // A month of each length to hand to croner, which reads the length from it.
        for (length, (year, month)) in [(2001, 2), (2000, 2), (2001, 4), (2001, 1)]
            .into_iter()
            .enumerate()
        {
            for (first, row) in days[length].iter_mut().enumerate() {
                for day in 1..=28 + length as u32 {
                    let weekday = Weekday::from_days_from_sunday(first as u32 + day - 1);
                    if pattern
                        .day_match(year, month, day, weekday)
                        .unwrap_or(false)
                    {
                        *row |= 1 << day;
                    }
                }
            }
        }
        CivilMatcher {
            seconds: mask(60, &|s| pattern.second_match(s).unwrap_or(false)),
            minutes: mask(60, &|m| pattern.minute_match(m).unwrap_or(false)),
            hours: mask(24, &|h| pattern.hour_match(h).unwrap_or(false)) as u32,
            months: mask(13, &|m| m > 0 && pattern.month_match(m).unwrap_or(false)) as u16,
            days,
        }
    }

    /// Whether the hour field matches every hour (the elapsed-time DST rule).
    pub(super) fn every_hour(&self) -> bool {
        self.hours == (1 << 24) - 1
    }

    /// Whether some date matches: a matching month of some length whose days match
    /// for some weekday of its first day (every month takes every such weekday, and
    /// February both lengths, within one 400-year cycle).
    pub(super) fn fires_at_all(&self) -> bool {
        (1..=12u32).any(|month| {
            let lengths: &[usize] = match month {
                2 => &[0, 1],
                4 | 6 | 9 | 11 => &[2],
                _ => &[3],
            };
            self.months & (1 << month) != 0
                && lengths
                    .iter()
                    .any(|&length| self.days[length].iter().any(|&row| row != 0))
        })
    }

    /// The first matching wall time at or after `from` (local seconds).
    pub(super) fn next_at_or_after(&self, from: i64) -> Option<i64> {
        let mut day_number = from.div_euclid(SECONDS_PER_DAY);
        let mut second_of_day = from.rem_euclid(SECONDS_PER_DAY) as u32;
        let (mut year, mut month, mut day) = civil_from_days(day_number);
        for _ in 0..MAX_MONTHS {
            let length = days_in_month(year, month);
            if self.months & (1 << month) != 0 {
                let first_weekday = (day_number - i64::from(day) + 5).rem_euclid(7) as usize;
                let mut candidates = self.days[(length - 28) as usize][first_weekday] >> day << day;
                while candidates != 0 {
                    let found = candidates.trailing_zeros();
                    // A later day than `from`'s is searched from midnight.
                    let time_from = if found == day { second_of_day } else { 0 };
                    if let Some(time) = self.time_at_or_after(time_from) {
                        let date = day_number + i64::from(found) - i64::from(day);
                        return Some(date * SECONDS_PER_DAY + i64::from(time));
                    }
                    candidates &= candidates - 1;
                }
            }
            // On to the first day of the next month.
            day_number += i64::from(length - day) + 1;
            (year, month, day) = if month == 12 {
                (year + 1, 1, 1)
            } else {
                (year, month + 1, 1)
            };
            second_of_day = 0;
        }
        None
    }

    /// The first matching time of day at or after `second_of_day`, in seconds.
    fn time_at_or_after(&self, second_of_day: u32) -> Option<u32> {
        let (mut hour, mut minute, mut second) = (
            second_of_day / 3600,
            second_of_day / 60 % 60,
            second_of_day % 60,
        );
        loop {
            let next_hour = next_bit(u64::from(self.hours), hour)?;
            if next_hour != hour {
                (hour, minute, second) = (next_hour, 0, 0);
            }
            let Some(next_minute) = next_bit(self.minutes, minute) else {
                (hour, minute, second) = (hour + 1, 0, 0);
                continue;
            };
            if next_minute != minute {
                (minute, second) = (next_minute, 0);
            }
            let Some(next_second) = next_bit(self.seconds, second) else {
                (minute, second) = (minute + 1, 0);
                if minute == 60 {
                    (hour, minute) = (hour + 1, 0);
                }
                continue;
            };
            return Some(hour * 3600 + minute * 60 + next_second);
        }
    }
}

/// The lowest set bit of `mask` at or above `from`.
fn next_bit(mask: u64, from: u32) -> Option<u32> {
    let above = mask.checked_shr(from)? << from;
    (above != 0).then(|| above.trailing_zeros())
}

fn days_in_month(year: i64, month: u32) -> u32 {
    match month {
        2 if year % 4 == 0 && (year % 100 != 0 || year % 400 == 0) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Year, month and day of a day number (days since 1970-01-01), by Howard Hinnant's
/// `civil_from_days`.
pub(super) fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let day_of_era = z.rem_euclid(146_097);
    let year_of_era =
        (day_of_era - day_of_era / 1_460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let shifted_month = (5 * day_of_year + 2) / 153;
    let day = (day_of_year - (153 * shifted_month + 2) / 5 + 1) as u32;
    let month = if shifted_month < 10 {
        shifted_month + 3
    } else {
        shifted_month - 9
    } as u32;
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    (year, month, day)
}
