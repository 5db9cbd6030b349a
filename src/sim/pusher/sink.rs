//! The simulated sink: what it answers each push, chosen by the seed.

use hyper::header::{HeaderMap, HeaderValue, RETRY_AFTER};
use hyper::StatusCode;

use super::PUSH_TIMEOUT;
use crate::sim::rng::Rng;
use crate::sink::outcome::PushOutcome;

/// The simulated sink's answer to one push, and how long it took: a poison expiration is
/// always answered 500 (at once, or slowly); the rest mostly 2xx, sometimes every other
/// answer a sink gives. In the liveness phase the sink answers every healthy expiration
/// 2xx (at once or slowly): a sink that keeps slowing down or refusing may fall behind a
/// repeating timer for good, and every healthy expiration must be delivered in the end.
pub(super) fn answer(rng: &mut Rng, poison: bool, liveness: bool) -> (PushOutcome, u64) {
    let slow = |rng: &mut Rng| 1 + rng.below(PUSH_TIMEOUT - 1);
    let http = |status: u16, retry_after: Option<&'static str>| {
        let mut headers = HeaderMap::new();
        if let Some(value) = retry_after {
            headers.insert(RETRY_AFTER, HeaderValue::from_static(value));
        }
        let status = StatusCode::from_u16(status).expect("a valid status");
        PushOutcome::of_answer(status, &headers)
    };
    if poison {
        let took = if rng.chance(1, 3) { slow(rng) } else { 0 };
        return (http(500, None), took);
    }
    let roll = rng.below(100);
    let roll = if liveness && roll >= 70 {
        roll % 55
    } else {
        roll
    };
    match roll {
        0..=54 => (http(200, None), 0),
        55..=69 => (http(204, None), slow(rng)),
        70..=73 => (http(404, None), 0),
        74..=79 => (http(503, None), 0),
        // No answer within the push timeout.
        80..=85 => (PushOutcome::Retry { after: None }, PUSH_TIMEOUT),
        86..=89 => (http(429, Some("1")), 0),
        90..=92 => (http(503, Some("0")), slow(rng)),
        _ => (
            PushOutcome::Unreachable {
                reason: "connection refused".into(),
            },
            0,
        ),
    }
}
