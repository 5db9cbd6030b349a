//! Faults injected on purpose, for the tests that check tickd fails safe.
//!
//! `TICKD_INJECT_PANIC=worker,store,delivery` (any of them) makes that part panic the
//! first time it handles work, so a test can see a panic end the process instead of
//! leaving it half alive. Unset, as in production, each check is one load of a flag.

use std::sync::OnceLock;

fn injected() -> &'static [String] {
    static POINTS: OnceLock<Vec<String>> = OnceLock::new();
    POINTS.get_or_init(|| {
        std::env::var("TICKD_INJECT_PANIC")
            .map(|points| {
                points
                    .split(',')
                    .map(|point| point.trim().to_owned())
                    .collect()
            })
            .unwrap_or_default()
    })
}

/// Panics if `TICKD_INJECT_PANIC` names `point`.
pub(crate) fn panic_if_injected(point: &str) {
    if injected().iter().any(|injected| injected == point) {
        panic!("injected panic in the {point} (TICKD_INJECT_PANIC)");
    }
}
