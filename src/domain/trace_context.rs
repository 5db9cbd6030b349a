//! The W3C trace context a registering call carried, kept with its timer so that every
//! firing can name the trace that asked for it.
//!
//! A timer outlives the request that set it by minutes or months; the only link between
//! the handler that finally runs and the request that caused it is this context, stored
//! whole (`traceparent`, `tracestate`, `baggage`) and handed back with each expiration.
//! tickd never refuses a call over it: a malformed `traceparent` is dropped (with a debug
//! log), and so is a `tracestate` or `baggage` over its bound.

use std::sync::Arc;

/// The longest `tracestate` kept: W3C Trace Context asks that at least 512 bytes be
/// propagated; longer ones may be dropped, and are.
pub const MAX_TRACESTATE_BYTES: usize = 512;
/// The longest `baggage` kept: W3C Baggage asks that at least 8,192 bytes be propagated.
/// A longer one is dropped whole (its members cannot be cut without changing its meaning).
pub const MAX_BAGGAGE_BYTES: usize = 8192;
/// What a kept context costs beyond its text: the `Arc`, three `String`s and the table's
/// map entry.
const OVERHEAD_BYTES: u64 = 128;

/// A registration's trace context, validated. Shared, not copied, between the timer and
/// each of its expirations.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceContext {
    traceparent: String,
    tracestate: String,
    baggage: String,
}

impl TraceContext {
    /// The context of `traceparent` (with `tracestate` and `baggage`, empty when absent),
    /// or `None` when `traceparent` is not a valid W3C version-00 header. An over-long
    /// `tracestate` or `baggage` is left out, the rest kept.
    pub fn parse(traceparent: &str, tracestate: &str, baggage: &str) -> Option<Arc<Self>> {
        let traceparent = traceparent.trim();
        if let Err(why) = check_traceparent(traceparent) {
            tracing::debug!(traceparent, why, "ignoring a traceparent");
            return None;
        }
        let bounded = |name: &str, value: &str, limit: usize| {
            let value = value.trim();
            if value.len() > limit {
                tracing::debug!(bytes = value.len(), limit, "ignoring an over-long {name}");
                return String::new();
            }
            value.to_owned()
        };
        Some(Arc::new(Self {
            traceparent: traceparent.to_owned(),
            tracestate: bounded("tracestate", tracestate, MAX_TRACESTATE_BYTES),
            baggage: bounded("baggage", baggage, MAX_BAGGAGE_BYTES),
        }))
    }

    /// A context read back from the log or the database; `None` for none (an empty
    /// `traceparent`). Stored ones were validated when they came in, and are again.
    pub fn stored(traceparent: &str, tracestate: &str, baggage: &str) -> Option<Arc<Self>> {
        if traceparent.is_empty() {
            return None;
        }
        Self::parse(traceparent, tracestate, baggage)
    }

    pub fn traceparent(&self) -> &str {
        &self.traceparent
    }

    pub fn tracestate(&self) -> &str {
        &self.tracestate
    }

    pub fn baggage(&self) -> &str {
        &self.baggage
    }

    /// The 32 hex digits of the trace id.
    pub fn trace_id(&self) -> &str {
        &self.traceparent[3..35]
    }

    /// The 16 hex digits of the registering call's span id.
    pub fn parent_span_id(&self) -> &str {
        &self.traceparent[36..52]
    }

    /// Whether the registering call's trace was sampled (flag bit 0).
    pub fn sampled(&self) -> bool {
        u8::from_str_radix(&self.traceparent[53..55], 16).is_ok_and(|flags| flags & 1 == 1)
    }

    /// Its W3C headers with a value (`traceparent`, then `tracestate` and `baggage` when
    /// given), as a push carries them: HTTP headers, gRPC metadata, NATS headers, fields
    /// of a Redis entry. The values are visible ASCII (they came in as gRPC metadata).
    pub fn headers(&self) -> impl Iterator<Item = (&'static str, &str)> {
        [
            ("traceparent", self.traceparent.as_str()),
            ("tracestate", self.tracestate.as_str()),
            ("baggage", self.baggage.as_str()),
        ]
        .into_iter()
        .filter(|(_, value)| !value.is_empty())
    }

    /// Its share of the memory budget, wherever a copy of it is kept.
    pub fn held_bytes(&self) -> u64 {
        (self.traceparent.len() + self.tracestate.len() + self.baggage.len()) as u64
            + OVERHEAD_BYTES
    }

    /// Its bytes in the log or a row (what the disk budget admits).
    pub fn stored_bytes(&self) -> usize {
        self.traceparent.len() + self.tracestate.len() + self.baggage.len()
    }
}

/// `00-<32 hex>-<16 hex>-<2 hex>`, lowercase, ids not all zero (W3C Trace Context, level
/// 1). Later versions are refused rather than guessed at.
fn check_traceparent(text: &str) -> Result<(), &'static str> {
    let parts: Vec<&str> = text.split('-').collect();
    let [version, trace_id, span_id, flags] = parts[..] else {
        return Err("not four dash-separated fields");
    };
    let lower_hex = |field: &str, length: usize| {
        field.len() == length
            && field
                .bytes()
                .all(|byte| byte.is_ascii_digit() || (b'a'..=b'f').contains(&byte))
    };
    if version != "00" {
        return Err("version is not 00");
    }
    if !lower_hex(trace_id, 32) || trace_id.bytes().all(|byte| byte == b'0') {
        return Err("trace id is not 32 lowercase hex digits, not all zero");
    }
    if !lower_hex(span_id, 16) || span_id.bytes().all(|byte| byte == b'0') {
        return Err("parent id is not 16 lowercase hex digits, not all zero");
    }
    if !lower_hex(flags, 2) {
        return Err("flags are not 2 lowercase hex digits");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const PARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn a_valid_traceparent_is_kept_with_its_state_and_baggage() {
        let context = TraceContext::parse(PARENT, "congo=t61rcWkgMzE", "user=42").unwrap();
        assert_eq!(context.trace_id(), "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!(context.parent_span_id(), "00f067aa0ba902b7");
        assert!(context.sampled());
        assert_eq!(context.tracestate(), "congo=t61rcWkgMzE");
        assert_eq!(context.baggage(), "user=42");
        assert_eq!(
            TraceContext::stored(PARENT, "congo=t61rcWkgMzE", "user=42"),
            Some(context)
        );
    }

    #[test]
    fn a_malformed_traceparent_is_no_context_and_over_long_state_is_left_out() {
        for bad in [
            "",
            "garbage",
            "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-1",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
        ] {
            assert_eq!(TraceContext::parse(bad, "", ""), None, "{bad:?}");
        }
        let long_state = "a".repeat(MAX_TRACESTATE_BYTES + 1);
        let long_baggage = "b".repeat(MAX_BAGGAGE_BYTES + 1);
        let context = TraceContext::parse(PARENT, &long_state, &long_baggage).unwrap();
        assert_eq!((context.tracestate(), context.baggage()), ("", ""));
        assert!(context.held_bytes() < 256);
    }
}
