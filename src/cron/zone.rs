//! From matching wall times to instants: the two daylight-saving rules of
//! [`super`] (read its docs for what they mean and why).
//!
//! The search in [`super::civil`] knows no zones, so croner's own DST handling never
//! runs; every decision about gaps and repeated hours is made in this file with jiff's
//! transition data. Instants are whole Unix seconds, wall times local seconds.

use std::sync::Mutex;

use jiff::tz::{AmbiguousOffset, Offset, TimeZone};
use jiff::Timestamp;

use super::civil::CivilMatcher;

/// A bound on the offset transitions one search may step over. A schedule of the
/// elapsed kind fires at least every few years (29 February across a century: 8), and
/// zones change offset about twice a year, so this is never reached by a real search.
const MAX_TRANSITIONS: usize = 1_000;

/// The wall-clock rule: every matching wall time fires once, at the first instant the
/// clock reads it or a later time (a time in a gap fires at the end of the gap, a
/// repeated time at its first occurrence). Returns the first firing at or after `start`.
pub(super) fn next_wall_clock(tz: &TimeZone, matcher: &CivilMatcher, start: i64) -> Option<i64> {
    // A wall time fires at or after `start` exactly when no instant before `start` has
    // read it or a later time, so search strictly after the latest reading so far.
    let mut from = latest_reading_before(tz, start)? + 1;
    // One pass suffices in real zones; the bound only guards odd transition sequences.
    for _ in 0..4 {
        let wall = matcher.next_at_or_after(from)?;
        let instant = first_reaching(tz, wall)?;
        if instant >= start {
            return Some(instant);
        }
        from = wall + 1;
    }
    None
}

/// The elapsed-time rule: every instant whose wall reading matches fires, once; a wall
/// time the clock skips never fires. Returns the first such instant at or after `start`.
pub(super) fn next_elapsed(
    tz: &TimeZone,
    matcher: &CivilMatcher,
    start: i64,
    spans: &SpanCache,
) -> Option<i64> {
    let mut from = start;
    for _ in 0..MAX_TRANSITIONS {
        // Between `from` and the next transition the offset is fixed, so the first
        // match there is the first matching wall reading at or after `from`'s.
        let span = spans.at(tz, from)?;
        let instant = matcher.next_at_or_after(from + span.offset)? - span.offset;
        match span.change {
            Some(change) if instant >= change => {
                // The match lies past the change: its reading there is skipped (a gap)
                // or comes again (a repeat); search on from the change with its offset.
                from = change;
            }
            _ => return Some(instant),
        }
    }
    None
}

/// A zone's offset from one instant on, and the next transition after it: the offset
/// holds for every instant from `from` up to (not including) `change`.
#[derive(Debug, Clone, Copy)]
pub(super) struct OffsetSpan {
    from: i64,
    offset: i64,
    change: Option<i64>,
}

impl OffsetSpan {
    fn covers(&self, second: i64) -> bool {
        second >= self.from && self.change.is_none_or(|change| second < change)
    }
}

/// The last [`OffsetSpan`] a schedule looked up. A timer's firings move forward, and a
/// zone changes its offset a couple of times a year, so nearly every next firing finds
/// its span here instead of searching the zone's transitions twice (about half the cost
/// of a next firing otherwise). A clone starts empty.
#[derive(Debug, Default)]
pub(super) struct SpanCache(Mutex<Option<OffsetSpan>>);

impl Clone for SpanCache {
    fn clone(&self) -> Self {
        Self::default()
    }
}

impl SpanCache {
    fn at(&self, tz: &TimeZone, second: i64) -> Option<OffsetSpan> {
        let mut cached = self
            .0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(span) = cached.filter(|span| span.covers(second)) {
            return Some(span);
        }
        let moment = Timestamp::from_second(second).ok()?;
        let span = OffsetSpan {
            from: second,
            offset: i64::from(tz.to_offset(moment).seconds()),
            change: tz
                .following(moment)
                .next()
                .map(|change| change.timestamp().as_second()),
        };
        debug_assert!(span.change.is_none_or(|change| change > second));
        *cached = Some(span);
        Some(span)
    }
}

/// The first instant whose wall reading is `wall` or later: the only instant of a
/// plain wall time, the first of a repeated one, the end of the gap for a skipped one.
fn first_reaching(tz: &TimeZone, wall: i64) -> Option<i64> {
    let civil = Offset::UTC.to_datetime(Timestamp::from_second(wall).ok()?);
    let instant = match tz.to_ambiguous_timestamp(civil).offset() {
        AmbiguousOffset::Unambiguous { offset } => wall - i64::from(offset.seconds()),
        AmbiguousOffset::Fold { before, .. } => wall - i64::from(before.seconds()),
        AmbiguousOffset::Gap { after, .. } => {
            // Read with the later offset, a time in the gap lands before the change;
            // the change itself is the first instant after the gap.
            let before_change = Timestamp::from_second(wall - i64::from(after.seconds())).ok()?;
            tz.following(before_change).next()?.timestamp().as_second()
        }
    };
    Some(instant)
}

/// The latest wall reading (local seconds) of any instant before `start`. Usually that
/// of the second before; after the clock is set back it is the reading just before the
/// change, which the clock reaches again only later.
fn latest_reading_before(tz: &TimeZone, start: i64) -> Option<i64> {
    let reading = |second: i64| -> Option<i64> {
        let moment = Timestamp::from_second(second).ok()?;
        Some(second + i64::from(tz.to_offset(moment).seconds()))
    };
    let mut latest = reading(start.checked_sub(1)?)?;
    if let Some(change) = tz.preceding(Timestamp::from_second(start).ok()?).next() {
        if let Some(before_change) = reading(change.timestamp().as_second() - 1) {
            latest = latest.max(before_change);
        }
    }
    Some(latest)
}
