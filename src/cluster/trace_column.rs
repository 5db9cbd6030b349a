//! How a timer's trace context is kept in a row: the `trace_context` column of
//! `tickd_timers` and of `tickd_expirations`, an encoded `tickd.v1.TraceContext` (the
//! API's message, so a reader of the database sees the fields the API names), NULL for
//! none.

use std::sync::Arc;

use prost::Message;

use crate::convert;
use crate::domain::TraceContext;
use crate::proto;

/// The column's value for `trace`.
pub(crate) fn trace_column(trace: Option<&TraceContext>) -> Option<Vec<u8>> {
    trace.map(|trace| convert::trace_context(trace).encode_to_vec())
}

/// The context a column holds; `None` for NULL, and for bytes that do not decode (logged:
/// a firing is never held back over its trace context).
pub(crate) fn stored_trace(column: Option<&[u8]>) -> Option<Arc<TraceContext>> {
    let bytes = column?;
    match proto::TraceContext::decode(bytes) {
        Ok(stored) => {
            TraceContext::stored(&stored.traceparent, &stored.tracestate, &stored.baggage)
        }
        Err(error) => {
            tracing::warn!(%error, "ignoring a stored trace context that does not decode");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_context_round_trips_through_its_column_and_none_is_null() {
        let context = TraceContext::parse(
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "congo=t61rcWkgMzE",
            "user=42",
        )
        .unwrap();
        let column = trace_column(Some(&context));
        assert_eq!(stored_trace(column.as_deref()), Some(context));
        assert_eq!(trace_column(None), None);
        assert_eq!(stored_trace(Some(&[0xff, 0xff])), None);
    }
}
