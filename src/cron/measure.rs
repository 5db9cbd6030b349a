//! A micro-measurement of [`CalendarSchedule::next_after`], callable from the benchmark
//! binary and run by an ignored test: the cost of computing a cron timer's next firing
//! on the worker thread, to set beside a plain timer's registration (about 1-3 µs).

use std::fmt;
use std::hint::black_box;
use std::time::Instant;

use super::schedule::CalendarSchedule;

/// Typical schedules, with the zone each is measured in.
const CASES: [(&str, &str); 8] = [
    ("*/1 * * * * *", "Europe/Berlin"),
    ("* * * * *", "UTC"),
    ("*/15 * * * *", "America/New_York"),
    ("@hourly", "Europe/Berlin"),
    ("30 2 * * *", "Europe/Berlin"),
    ("0 9 * * MON-FRI", "America/New_York"),
    ("0 0 L * *", "UTC"),
    ("@yearly", "Europe/Berlin"),
];

/// The mean cost of one `next_after` call for one schedule.
#[derive(Clone, Debug)]
pub struct Measurement {
    pub expression: &'static str,
    pub time_zone: &'static str,
    pub ns_per_call: f64,
}

impl fmt::Display for Measurement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "cron_next expression={:?} time_zone={} ns_per_call={:.0}",
            self.expression, self.time_zone, self.ns_per_call
        )
    }
}

/// Times `calls` calls of `next_after` per schedule, from instants spread over 2025
/// (every 7919 s, so the DST days and month ends are among them).
pub fn measure_next_after(calls: u32) -> Vec<Measurement> {
    const START_2025: u64 = 1_735_689_600 * 1_000_000_000;
    const STEP: u64 = 7_919 * 1_000_000_000 + 123_456_789;
    CASES
        .iter()
        .map(|&(expression, time_zone)| {
            let schedule =
                CalendarSchedule::parse(expression, time_zone).expect("the cases are valid");
            let started = Instant::now();
            for call in 0..u64::from(calls) {
                let after = START_2025 + call % 4_000 * STEP;
                black_box(schedule.next_after(black_box(after)));
            }
            Measurement {
                expression,
                time_zone,
                ns_per_call: started.elapsed().as_nanos() as f64 / f64::from(calls.max(1)),
            }
        })
        .collect()
}
