//! The spans of a timer's life, as the collector receives them:
//!
//! - `tickd.register`: the registering call, a child of the caller's span (its
//!   `traceparent`), made by the gRPC handler as a `tracing` span.
//! - `tickd.fire`: one firing, the root of a trace of its own *linked* to the registering
//!   call's span: the registration's trace ended long ago, and a timer may fire many times.
//!   It runs from the firing to its first delivery and holds the namespace, timer id, key,
//!   fired_count and lateness.
//! - `tickd.deliver` (a Subscribe stream) and `tickd.push` (a sink): one attempt, a child of
//!   the fire span; a later attempt (a redelivery, a retry) also links to the
//!   first attempt's span. A push span ends with the sink's answer (`tickd.outcome`); a
//!   sink that asked to be sent less, or could not be reached, is pushed the same attempt
//!   again: each later try is a span of its own (random id) linked to the attempt's.
//!   A redrive starts the attempts over, at 1: its spans are those of a new first
//!   attempt under the same fire span, which a collector sees again.
//! - `tickd.ack`: an acknowledgement, a child of the attempt it settles.
//!
//! Only expirations whose registration carried a sampled context make spans: sampling
//! follows the parent, and a timer nobody traced costs nothing. The ids of the fire and
//! attempt spans follow from the expiration ([`super::ids`]), so a redelivery after a
//! restart, or on another replica, links to the first attempt all the same.

use std::collections::VecDeque;
use std::str::FromStr;
use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use opentelemetry::trace::{
    Link, Span, SpanContext, SpanKind, Status, TraceContextExt, TraceFlags, TraceId, TraceState,
    Tracer,
};
use opentelemetry::{Context, KeyValue};
use rustc_hash::FxHashMap;

use super::ids::{with_ids, ExpirationIds};
use crate::domain::{Delivered, TraceContext};

/// Deliveries on Subscribe streams whose ack is awaited to end an ack span, at most: the
/// oldest is forgotten past it (its ack then makes no span), so a subscriber that never
/// acks costs bounded memory.
const AWAITED_ACKS: usize = 65_536;

/// The remote span context a stored trace context names.
pub(crate) fn span_context_of(trace: &TraceContext) -> Option<SpanContext> {
    let trace_id = TraceId::from_hex(trace.trace_id()).ok()?;
    let span_id = opentelemetry::trace::SpanId::from_hex(trace.parent_span_id()).ok()?;
    let flags = if trace.sampled() {
        TraceFlags::SAMPLED
    } else {
        TraceFlags::default()
    };
    let state = TraceState::from_str(trace.tracestate()).unwrap_or_default();
    Some(SpanContext::new(trace_id, span_id, flags, true, state))
}

/// The context a registering call's span is a child of.
pub(crate) fn parent_of(trace: &TraceContext) -> Option<Context> {
    span_context_of(trace).map(|span| Context::new().with_remote_span_context(span))
}

/// What one delivery attempt is, for its spans.
struct Attempt<'a> {
    delivered: &'a Delivered,
    registration: SpanContext,
    ids: ExpirationIds,
}

impl<'a> Attempt<'a> {
    /// `None` when the expiration makes no spans (no sampled context, or export is off).
    fn of(delivered: &'a Delivered) -> Option<Self> {
        if !super::exporting() {
            return None;
        }
        let trace = delivered.expiration.trace.as_deref()?;
        let registration = span_context_of(trace).filter(SpanContext::is_sampled)?;
        let expiration = &delivered.expiration;
        let ids = ExpirationIds::of(
            &expiration.namespace,
            expiration.id.0,
            expiration.fired_count,
        );
        Some(Self {
            delivered,
            registration,
            ids,
        })
    }

    fn fire_context(&self) -> SpanContext {
        SpanContext::new(
            self.ids.trace(),
            self.ids.fire_span(),
            TraceFlags::SAMPLED,
            false,
            TraceState::default(),
        )
    }

    /// The fire span, made with the first try of the first attempt.
    fn record_fire(&self) {
        if self.delivered.attempt != 1 {
            return;
        }
        let expiration = &self.delivered.expiration;
        let tracer = super::tracer();
        let lateness = expiration
            .fired_unix
            .saturating_sub(expiration.deadline_unix);
        let mut attributes = vec![
            KeyValue::new("tickd.namespace", expiration.namespace.to_string()),
            KeyValue::new("tickd.timer_id", expiration.id.to_string()),
            KeyValue::new("tickd.fired_count", expiration.fired_count as i64),
            KeyValue::new("tickd.lateness_ms", lateness as f64 / 1e6),
            KeyValue::new("tickd.late", expiration.late),
        ];
        if let Some(key) = &expiration.key {
            attributes.push(KeyValue::new("tickd.key", key.clone()));
        }
        let builder = tracer
            .span_builder("tickd.fire")
            .with_kind(SpanKind::Internal)
            .with_start_time(at_unix(expiration.fired_unix))
            .with_attributes(attributes)
            .with_links(vec![Link::with_context(self.registration.clone())]);
        let mut span = with_ids(self.ids.trace(), self.ids.fire_span(), || {
            builder.start_with_context(&tracer, &Context::new())
        });
        span.end();
    }

    fn attempt_context(&self, attempt: u32) -> SpanContext {
        SpanContext::new(
            self.ids.trace(),
            self.ids.delivery_span(attempt),
            TraceFlags::SAMPLED,
            false,
            TraceState::default(),
        )
    }

    /// Starts the span of this attempt's try `try_number` (1 for the first), `name`, a
    /// child of the fire span.
    fn start(
        &self,
        name: &'static str,
        kind: SpanKind,
        sink: Option<&str>,
        try_number: u32,
    ) -> AttemptSpan {
        if try_number == 1 {
            self.record_fire();
        }
        let tracer = super::tracer();
        let delivered = self.delivered;
        let mut attributes = vec![
            KeyValue::new(
                "tickd.namespace",
                delivered.expiration.namespace.to_string(),
            ),
            KeyValue::new("tickd.timer_id", delivered.expiration.id.to_string()),
            KeyValue::new("tickd.attempt", i64::from(delivered.attempt)),
            KeyValue::new(
                "tickd.delivery_id",
                crate::convert::delivery_id(delivered.delivery_id),
            ),
        ];
        if let Some(sink) = sink {
            attributes.push(KeyValue::new("tickd.sink", sink.to_owned()));
        }
        if try_number > 1 {
            attributes.push(KeyValue::new("tickd.try", i64::from(try_number)));
        }
        let mut links = Vec::new();
        if delivered.attempt > 1 {
            links.push(Link::with_context(self.attempt_context(1)));
        }
        if try_number > 1 {
            links.push(Link::with_context(self.attempt_context(delivered.attempt)));
        }
        let builder = tracer
            .span_builder(name)
            .with_kind(kind)
            .with_attributes(attributes)
            .with_links(links);
        let parent = Context::new().with_remote_span_context(self.fire_context());
        let span = if try_number == 1 {
            with_ids(
                self.ids.trace(),
                self.ids.delivery_span(delivered.attempt),
                || builder.start_with_context(&tracer, &parent),
            )
        } else {
            builder.start_with_context(&tracer, &parent)
        };
        AttemptSpan { span }
    }
}

/// One attempt's span, ended by its outcome.
pub(crate) struct AttemptSpan {
    span: opentelemetry::global::BoxedSpan,
}

impl AttemptSpan {
    /// Ends a push's span with the sink's answer (`delivered`, `retry`, `dead`, ...).
    pub(crate) fn answered(mut self, outcome: &str, failed: bool) {
        self.span
            .set_attribute(KeyValue::new("tickd.outcome", outcome.to_owned()));
        if failed {
            self.span.set_status(Status::error(outcome.to_owned()));
        }
        self.span.end();
    }

    /// Ends a push's span with its ack: an ack span, its child.
    pub(crate) fn acknowledged(mut self) {
        let context = self.span.span_context().clone();
        self.span
            .set_attribute(KeyValue::new("tickd.outcome", "delivered"));
        self.span.end();
        record_ack(context);
    }
}

/// A push's span, started as try `try_number` of its attempt leaves; `None` when it makes
/// none.
pub(crate) fn push_started(
    delivered: &Delivered,
    sink: &str,
    try_number: u32,
) -> Option<AttemptSpan> {
    Attempt::of(delivered)
        .map(|attempt| attempt.start("tickd.push", SpanKind::Producer, Some(sink), try_number))
}

/// A Subscribe stream's delivery, as it is sent: its span ends at once, and its ack, when
/// one comes to this tickd, makes an ack span under it.
pub(crate) fn delivery_sent(delivered: &Delivered) {
    let Some(attempt) = Attempt::of(delivered) else {
        return;
    };
    let mut span = attempt.start("tickd.deliver", SpanKind::Producer, None, 1);
    let context = span.span.span_context().clone();
    span.span.end();
    let mut awaited = awaited_acks()
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    awaited.remember(
        (
            delivered.expiration.namespace.to_string(),
            delivered.delivery_id,
        ),
        context,
    );
}

/// Acks of `namespace`'s `delivery_ids` that settled something: each makes an ack span
/// under its delivery's span, when this tickd sent that delivery.
pub(crate) fn acknowledged(namespace: &str, delivery_ids: &[u64]) {
    if !super::exporting() {
        return;
    }
    let mut awaited = awaited_acks()
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    let contexts: Vec<SpanContext> = delivery_ids
        .iter()
        .filter_map(|&id| awaited.take(&(namespace.to_owned(), id)))
        .collect();
    drop(awaited);
    contexts.into_iter().for_each(record_ack);
}

fn record_ack(delivery: SpanContext) {
    let tracer = super::tracer();
    let parent = Context::new().with_remote_span_context(delivery);
    let mut span = tracer
        .span_builder("tickd.ack")
        .with_kind(SpanKind::Consumer)
        .start_with_context(&tracer, &parent);
    span.end();
}

fn at_unix(nanos: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_nanos(nanos)
}

type AckKey = (String, u64);

/// Deliveries awaiting their ack, oldest first, bounded by [`AWAITED_ACKS`].
#[derive(Default)]
struct AwaitedAcks {
    by_delivery: FxHashMap<AckKey, SpanContext>,
    order: VecDeque<AckKey>,
}

impl AwaitedAcks {
    fn remember(&mut self, key: AckKey, context: SpanContext) {
        while self.order.len() >= AWAITED_ACKS {
            if let Some(oldest) = self.order.pop_front() {
                self.by_delivery.remove(&oldest);
            }
        }
        self.order.push_back(key.clone());
        self.by_delivery.insert(key, context);
        debug_assert!(self.by_delivery.len() <= self.order.len());
    }

    fn take(&mut self, key: &AckKey) -> Option<SpanContext> {
        // Its place in `order` goes when it reaches the front.
        self.by_delivery.remove(key)
    }
}

fn awaited_acks() -> &'static Mutex<AwaitedAcks> {
    static AWAITED: std::sync::OnceLock<Mutex<AwaitedAcks>> = std::sync::OnceLock::new();
    AWAITED.get_or_init(Default::default)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stored_context_is_the_remote_span_it_names() {
        let trace = TraceContext::parse(
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "congo=t61rcWkgMzE",
            "",
        )
        .unwrap();
        let span = span_context_of(&trace).unwrap();
        assert_eq!(
            span.trace_id(),
            TraceId::from_hex("4bf92f3577b34da6a3ce929d0e0e4736").unwrap()
        );
        assert!(span.is_sampled() && span.is_remote());
        assert_eq!(span.trace_state().get("congo"), Some("t61rcWkgMzE"));
    }

    #[test]
    fn awaited_acks_are_bounded_and_taken_once() {
        let mut awaited = AwaitedAcks::default();
        for id in 0..(AWAITED_ACKS as u64 + 10) {
            awaited.remember(("n".into(), id), SpanContext::NONE);
        }
        assert_eq!(awaited.order.len(), AWAITED_ACKS);
        assert!(
            awaited.take(&("n".into(), 0)).is_none(),
            "the oldest were forgotten"
        );
        assert!(awaited.take(&("n".into(), 20)).is_some());
        assert!(awaited.take(&("n".into(), 20)).is_none());
    }
}
