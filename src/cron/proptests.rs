//! Property: successive firings strictly increase and are never before what was asked,
//! and each fires on a wall time the expression matches (or, under the wall-clock rule,
//! at the end of a gap), for expressions from a small grammar in zones with unusual
//! changes (Lord Howe's half hour, Apia's skipped day in 2011, Dublin's negative DST).
//! And: the bit-mask search finds the wall time croner's own search finds.

use super::*;
use jiff::tz::TimeZoneDatabase;
use jiff::Timestamp;
use proptest::prelude::*;

const NS: u64 = 1_000_000_000;

const ZONES: [&str; 9] = [
    "UTC",
    "Europe/Berlin",
    "America/New_York",
    "Australia/Lord_Howe",
    "Pacific/Apia",
    "Europe/Dublin",
    "Asia/Kolkata",
    "America/Sao_Paulo",
    "Pacific/Chatham",
];

fn expression() -> impl Strategy<Value = String> {
    let second = prop::sample::select(vec!["0", "*/1", "*/15", "5,35"]);
    let minute = prop::sample::select(vec!["*", "0", "30", "*/7", "0-10/5", "59"]);
    let hour = prop::sample::select(vec!["*", "2", "1-3", "*/2", "0,12", "22", "0-23"]);
    let day = prop::sample::select(vec!["*", "1", "L", "15", "28-31", "29", "?"]);
    let month = prop::sample::select(vec!["*", "2", "3,10", "11", "JAN-MAR", "*/4"]);
    let weekday = prop::sample::select(vec!["*", "0", "MON-FRI", "5", "6L", "1#2"]);
    (any::<bool>(), second, minute, hour, day, month, weekday).prop_map(
        |(seconds, s, mi, h, d, mo, w)| {
            let five = format!("{mi} {h} {d} {mo} {w}");
            if seconds {
                format!("{s} {five}")
            } else {
                five
            }
        },
    )
}

/// 2011-01-01 (before Apia's skipped day) to 2040-01-01, at any nanosecond.
fn instant() -> impl Strategy<Value = u64> {
    1_293_840_000 * NS..2_208_988_800 * NS
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]
    #[test]
    fn firings_increase_and_are_never_early(
        expression in expression(),
        zone in prop::sample::select(ZONES.to_vec()),
        start in instant(),
    ) {
        let schedule = CalendarSchedule::parse(&expression, zone).unwrap();
        let cron = expression::croner_parser().parse(&expression).unwrap();
        let tz = TimeZoneDatabase::bundled().get(zone).unwrap();
        let mut after = start;
        for _ in 0..12 {
            let next = schedule.next_after(after).expect("fires again");
            prop_assert!(next > after, "{expression} {zone}: {next} after {after}");
            prop_assert_eq!(next % NS, 0);
            let at_or_after = schedule.next_at_or_after(after).unwrap();
            prop_assert!(at_or_after >= after && at_or_after <= next);
            let ts = Timestamp::from_second((next / NS) as i64).unwrap();
            let wall = tz.to_offset(ts).to_datetime(ts);
            let matches = cron.is_time_matching(&wall).unwrap();
            // Under the wall-clock rule a gap time fires at the change, whose own wall
            // reading need not match.
            let at_change = tz.preceding(ts + jiff::SignedDuration::from_secs(1))
                .next()
                .is_some_and(|change| change.timestamp() == ts);
            prop_assert!(
                matches || (!schedule.matcher.every_hour() && at_change),
                "{expression} {zone}: {next} reads {wall}, which does not match"
            );
            after = next;
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(500))]
    #[test]
    fn the_mask_search_agrees_with_croner(expression in expression(), start in instant()) {
        let matcher = expression::parse(&expression).unwrap();
        let cron = expression::croner_parser().parse(&expression).unwrap();
        let mut local = (start / NS) as i64;
        for _ in 0..8 {
            let ours = matcher.next_at_or_after(local).unwrap();
            let from = jiff::tz::Offset::UTC.to_datetime(Timestamp::from_second(local).unwrap());
            let theirs = cron.find_next_occurrence(&from, true).unwrap();
            let theirs = jiff::tz::Offset::UTC.to_timestamp(theirs).unwrap().as_second();
            prop_assert_eq!(ours, theirs, "{} from {}", expression, from);
            local = ours + 1;
        }
    }
}
