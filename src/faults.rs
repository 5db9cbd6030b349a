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

/// True if the simulation planted the bug `name` (`TICKD_DST_PLANT=<name>`), to show that
/// it catches what it claims to. Only the `sim` feature has plants: in the service's build
/// this is `false`, and every planted branch is compiled out.
#[inline(always)]
pub(crate) fn planted(name: &str) -> bool {
    #[cfg(feature = "sim")]
    {
        static PLANT: OnceLock<Option<String>> = OnceLock::new();
        PLANT
            .get_or_init(|| std::env::var("TICKD_DST_PLANT").ok())
            .as_deref()
            == Some(name)
    }
    #[cfg(not(feature = "sim"))]
    {
        let _ = name;
        false
    }
}
