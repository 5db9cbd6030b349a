//! Span ids a later event can compute: the ids of an expiration's fire span and of each
//! delivery attempt's span follow from the expiration itself (namespace, timer id, firing),
//! so a redelivery after a restart, or on another replica, links to the first delivery's
//! span without anything of it having been kept.
//!
//! The SDK asks its [`IdGenerator`] for every span's ids; [`ChosenIds`] answers with the ids
//! the caller chose for the next span it starts on this thread ([`with_ids`]), and random
//! ones otherwise (every span tickd does not name this way).

use std::cell::Cell;
use std::hash::Hasher;

use opentelemetry::trace::{SpanId, TraceId};
use opentelemetry_sdk::trace::{IdGenerator, RandomIdGenerator};

thread_local! {
    static NEXT_TRACE: Cell<Option<TraceId>> = const { Cell::new(None) };
    static NEXT_SPAN: Cell<Option<SpanId>> = const { Cell::new(None) };
}

/// Runs `start` (which starts one span) with that span's ids chosen: `trace` if the span is
/// a root (a child keeps its parent's trace), `span` in any case.
pub(crate) fn with_ids<T>(trace: TraceId, span: SpanId, start: impl FnOnce() -> T) -> T {
    /// Clears what the span did not take, even if starting it panicked.
    struct Cleared;
    impl Drop for Cleared {
        fn drop(&mut self) {
            NEXT_TRACE.with(|next| next.set(None));
            NEXT_SPAN.with(|next| next.set(None));
        }
    }
    NEXT_TRACE.with(|next| next.set(Some(trace)));
    NEXT_SPAN.with(|next| next.set(Some(span)));
    let _cleared = Cleared;
    start()
}

/// The SDK's id source: the chosen ids when there are some, random ones otherwise.
#[derive(Debug, Default)]
pub(crate) struct ChosenIds {
    random: RandomIdGenerator,
}

impl IdGenerator for ChosenIds {
    fn new_trace_id(&self) -> TraceId {
        match NEXT_TRACE.with(Cell::take) {
            Some(trace) => trace,
            None => self.random.new_trace_id(),
        }
    }

    fn new_span_id(&self) -> SpanId {
        match NEXT_SPAN.with(Cell::take) {
            Some(span) => span,
            None => self.random.new_span_id(),
        }
    }
}

/// The ids of one expiration's spans, from what names it on either backend.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ExpirationIds {
    seed: u64,
}

impl ExpirationIds {
    pub(crate) fn of(namespace: &str, timer_id: u64, fired_count: u64) -> Self {
        let length = namespace.len() as u64;
        Self {
            seed: hash(&[
                &length.to_le_bytes(),
                namespace.as_bytes(),
                &timer_id.to_le_bytes(),
                &fired_count.to_le_bytes(),
            ]),
        }
    }

    /// The trace its fire span roots.
    pub(crate) fn trace(self) -> TraceId {
        let high = self.derived(b"trace-high", 0);
        let low = self.derived(b"trace-low", 0);
        TraceId::from(((u128::from(high) << 64) | u128::from(low)).max(1))
    }

    pub(crate) fn fire_span(self) -> SpanId {
        span_id(self.derived(b"fire", 0))
    }

    /// The span of delivery attempt `attempt` (1 for the first).
    pub(crate) fn delivery_span(self, attempt: u32) -> SpanId {
        span_id(self.derived(b"delivery", u64::from(attempt)))
    }

    fn derived(self, what: &[u8], number: u64) -> u64 {
        hash(&[&self.seed.to_le_bytes(), what, &number.to_le_bytes()])
    }
}

fn span_id(raw: u64) -> SpanId {
    SpanId::from(raw.max(1))
}

/// A stable 64-bit hash of byte strings (SipHash-2-4 with fixed keys over explicit
/// little-endian bytes, never `Hash` impls: the same on every replica, platform and build).
fn hash(parts: &[&[u8]]) -> u64 {
    #[allow(deprecated)]
    let mut hasher = std::hash::SipHasher::new_with_keys(0x7469_636b_6421, 0x0073_7061_6e73);
    for part in parts {
        hasher.write(part);
    }
    hasher.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_expirations_ids_follow_from_it_and_differ_between_firings_and_attempts() {
        let first = ExpirationIds::of("orders", 42, 1);
        let again = ExpirationIds::of("orders", 42, 1);
        assert_eq!(first.trace(), again.trace());
        assert_eq!(first.delivery_span(2), again.delivery_span(2));
        assert_ne!(first.delivery_span(1), first.delivery_span(2));
        assert_ne!(first.fire_span(), first.delivery_span(1));
        assert_ne!(first.trace(), ExpirationIds::of("orders", 42, 2).trace());
        assert_ne!(first.trace(), ExpirationIds::of("other", 42, 1).trace());
    }

    #[test]
    fn the_ids_are_the_same_on_every_build() {
        // Another replica, or the next release, must derive the same ids: a change here
        // breaks the links between a firing's spans across an upgrade.
        let ids = ExpirationIds::of("orders", 42, 1);
        assert_eq!(ids.trace().to_string(), "54c2c11d184d38e25acf8a9da5edc03f");
        assert_eq!(ids.delivery_span(2).to_string(), "7985f3dcf18882fc");
    }

    #[test]
    fn chosen_ids_are_used_once_then_random_ones() {
        let ids = ChosenIds::default();
        let (trace, span) = (TraceId::from(7_u128), SpanId::from(9_u64));
        with_ids(trace, span, || {
            // The SDK asks for the span id first.
            assert_eq!(ids.new_span_id(), span);
            assert_eq!(ids.new_trace_id(), trace);
            assert_ne!(ids.new_span_id(), span, "the next span is not named");
        });
        assert_ne!(ids.new_trace_id(), trace);
    }
}
