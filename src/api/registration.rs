//! Registration: NewTimeout, NewTimeouts (a batch), Cancel and Reschedule. A new timer's
//! spec and a reschedule's due time are validated here (every check names the field it
//! refused), handed to [`Timers`](crate::domain::Timers), and the registered timer
//! answered without its payload.

use std::sync::Arc;
use std::time::Duration;

use prost_types::{Duration as ProtoDuration, Timestamp};
use tonic::metadata::MetadataMap;
use tonic::{Request, Response, Status};

use super::auth::grant_of;
use super::service::TimersService;
use super::status::item_error;
use crate::convert::{self, unix_now, Limits};
use crate::cron::CalendarSchedule;
use crate::domain::{Calendar, Due, NewTimer, Registered, TimerError, TimerView, TraceContext};
use crate::proto;
use crate::telemetry::{self, spans};
use tracing::Instrument;
use tracing_opentelemetry::OpenTelemetrySpanExt;

pub(super) async fn new_timeout(
    service: &TimersService,
    request: Request<proto::NewTimeoutRequest>,
) -> Result<Response<proto::NewTimeoutResponse>, Status> {
    let grant = grant_of(&request);
    let _in_flight = service.hold_request(&request)?;
    let trace = trace_context_of(request.metadata());
    let spec = request
        .into_inner()
        .timer
        .ok_or_else(|| TimerError::invalid("timer", "is required"))?;
    let timer = NewTimer {
        trace,
        ..service.limits.new_timer(spec)?
    };
    grant.check(Some(&timer.namespace))?;
    let span = register_span(
        "tickd.register",
        timer.trace.as_deref(),
        &timer.namespace,
        1,
    );
    let registered = service
        .timers
        .register(vec![timer])
        .instrument(span)
        .await?
        .pop()
        .ok_or_else(unanswered)??;
    Ok(Response::new(registration(registered)))
}

pub(super) async fn new_timeouts(
    service: &TimersService,
    request: Request<proto::NewTimeoutsRequest>,
) -> Result<Response<proto::NewTimeoutsResponse>, Status> {
    let grant = grant_of(&request);
    let _in_flight = service.hold_request(&request)?;
    let trace = trace_context_of(request.metadata());
    let specs = request.into_inner().timers;
    if specs.len() > service.limits.max_batch {
        return Err(Status::resource_exhausted(format!(
            "timers: {} items is over the batch limit of {} (--max-batch)",
            specs.len(),
            service.limits.max_batch
        )));
    }
    // Invalid items are answered here; only the valid ones go to the worker.
    let validated: Vec<_> = specs
        .into_iter()
        .map(|spec| {
            let timer = NewTimer {
                trace: trace.clone(),
                ..service.limits.new_timer(spec)?
            };
            grant.check(Some(&timer.namespace))?;
            Ok(timer)
        })
        .collect();
    let valid: Vec<NewTimer> = validated
        .iter()
        .filter_map(|item| item.as_ref().ok())
        .cloned()
        .collect();
    let span = match valid.first() {
        Some(first) => register_span(
            "tickd.register",
            trace.as_deref(),
            &first.namespace,
            valid.len(),
        ),
        None => tracing::Span::none(),
    };
    let mut registered = service
        .timers
        .register(valid)
        .instrument(span)
        .await?
        .into_iter();
    let results = validated
        .into_iter()
        .map(|item| {
            let outcome = item.and_then(|_| registered.next().ok_or_else(unanswered)?);
            let result = match outcome {
                Ok(registered) => {
                    proto::new_timeout_result::Result::Registered(registration(registered))
                }
                Err(error) => {
                    proto::new_timeout_result::Result::Error(item_error(&Status::from(error)))
                }
            };
            proto::NewTimeoutResult {
                result: Some(result),
            }
        })
        .collect();
    Ok(Response::new(proto::NewTimeoutsResponse { results }))
}

pub(super) async fn cancel(
    service: &TimersService,
    request: Request<proto::CancelRequest>,
) -> Result<Response<proto::CancelResponse>, Status> {
    let grant = grant_of(&request);
    let timer = service.authorized_ref(&grant, request.into_inner().timer)?;
    let cancelled = service.timers.cancel(timer).await?;
    Ok(Response::new(proto::CancelResponse { cancelled }))
}

pub(super) async fn reschedule(
    service: &TimersService,
    request: Request<proto::RescheduleRequest>,
) -> Result<Response<proto::RescheduleResponse>, Status> {
    let grant = grant_of(&request);
    let _in_flight = service.hold_request(&request)?;
    let trace = trace_context_of(request.metadata());
    let request = request.into_inner();
    let timer = service.authorized_ref(&grant, request.timer)?;
    let due = service
        .limits
        .new_due(request.delay.as_ref(), request.deadline.as_ref())?;
    let payload = request
        .payload
        .map(|payload| service.limits.payload(&payload))
        .transpose()?;
    let span = register_span("tickd.reschedule", trace.as_deref(), &timer.namespace, 1);
    let view = service
        .timers
        .reschedule(timer, due, payload, trace)
        .instrument(span)
        .await?;
    Ok(Response::new(proto::RescheduleResponse {
        timer: Some(registered_timer(view)),
    }))
}

/// The W3C trace context of a registering call (`traceparent`, `tracestate`, `baggage`
/// metadata), kept with the timer; none when `traceparent` is absent or malformed, which
/// never refuses the call. A value that is not text counts as absent.
fn trace_context_of(metadata: &MetadataMap) -> Option<Arc<TraceContext>> {
    let text = |name: &str| {
        metadata
            .get(name)
            .and_then(|value| value.to_str().ok())
            .unwrap_or_default()
    };
    let traceparent = text("traceparent");
    if traceparent.is_empty() {
        return None;
    }
    TraceContext::parse(traceparent, text("tracestate"), text("baggage"))
}

/// The span of a registering call (`tickd.register`), a child of the caller's span; none
/// unless export is on and the call carried a context.
fn register_span(
    name: &'static str,
    trace: Option<&TraceContext>,
    namespace: &str,
    timers: usize,
) -> tracing::Span {
    let Some(parent) = trace
        .filter(|_| telemetry::exporting())
        .and_then(spans::parent_of)
    else {
        return tracing::Span::none();
    };
    let span = tracing::info_span!(
        "tickd.register",
        otel.name = name,
        otel.kind = "server",
        tickd.namespace = namespace,
        tickd.timers = timers
    );
    // Fails only without the export layer, when the span is exported by nothing anyway.
    let _ = span.set_parent(parent);
    span
}

/// A backend answered a batch with fewer items than it was given: it stopped mid-way.
fn unanswered() -> TimerError {
    TimerError::Unavailable("the backend answered no result for this item".into())
}

/// A registration's answer, alone or as one item of a batch.
fn registration(registered: Registered) -> proto::NewTimeoutResponse {
    proto::NewTimeoutResponse {
        timer: Some(registered_timer(registered.timer)),
        created: registered.created,
        replaced: registered.replaced,
    }
}

/// A registration's timer without its payload, which the caller sent and already has.
/// Echoing it back would double the bytes of every registration and could make the answer
/// to a batch larger than the caller accepts (4 MiB for most clients).
fn registered_timer(view: TimerView) -> proto::Timer {
    proto::Timer {
        payload: Default::default(),
        ..convert::timer(view)
    }
}

impl Limits {
    fn new_timer(&self, spec: proto::TimerSpec) -> Result<NewTimer, TimerError> {
        let namespace = self.namespace(&spec.namespace)?;
        let key = match spec.key.as_str() {
            "" => None,
            key => Some(self.key(key)?),
        };
        let payload = self.payload(&spec.payload)?;
        let repeat = spec
            .repeat
            .as_ref()
            .map(|repeat| self.interval("repeat", repeat))
            .transpose()?;
        if let Some(repeat) = repeat.filter(|repeat| *repeat < self.min_repeat) {
            // Shorter than a tick, it would fire on every tick for ever.
            return Err(TimerError::invalid(
                "repeat",
                format!(
                    "{repeat:?} is shorter than the wheel's tick of {:?} (--tick)",
                    self.min_repeat
                ),
            ));
        }
        let ttl = spec
            .ttl
            .as_ref()
            .map(|ttl| self.interval("ttl", ttl))
            .transpose()?;
        let calendar = calendar(&spec.cron, &spec.time_zone)?;
        if calendar.is_some() && repeat.is_some() {
            return Err(TimerError::invalid(
                "cron",
                "give either cron or repeat, not both",
            ));
        }
        if calendar.is_some() && ttl.is_some() {
            // A lease's deadline is its last heartbeat plus its ttl, not a calendar's.
            return Err(TimerError::invalid("ttl", "a cron timer cannot be a lease"));
        }
        if spec.replace && key.is_none() {
            return Err(TimerError::invalid(
                "replace",
                "needs a key: it replaces the pending timer under that key",
            ));
        }
        let due = match (&spec.delay, &spec.deadline, ttl) {
            (Some(_), Some(_), _) => {
                return Err(TimerError::invalid(
                    "deadline",
                    "give either delay or deadline, not both",
                ))
            }
            (Some(delay), None, _) => Due::After(self.duration("delay", delay)?),
            (None, Some(deadline), _) => Due::AtUnix(self.deadline("deadline", deadline)?),
            (None, None, Some(ttl)) => Due::After(ttl),
            // A cron timer's first firing is its first cron time from now.
            (None, None, None) if calendar.is_some() => Due::After(Duration::ZERO),
            (None, None, None) => {
                return Err(TimerError::invalid(
                    "delay",
                    "one of delay, deadline or ttl is required",
                ))
            }
        };
        Ok(NewTimer {
            namespace,
            key,
            due,
            payload,
            repeat,
            ttl,
            calendar,
            replace: spec.replace,
            // The call's, not the spec's: set by the handler from its metadata.
            trace: None,
        })
    }

    /// Reschedule's new due time: exactly one of `delay` and `deadline`.
    fn new_due(
        &self,
        delay: Option<&ProtoDuration>,
        deadline: Option<&Timestamp>,
    ) -> Result<Due, TimerError> {
        match (delay, deadline) {
            (Some(_), Some(_)) => Err(TimerError::invalid(
                "deadline",
                "give either delay or deadline, not both",
            )),
            (Some(delay), None) => Ok(Due::After(self.duration("delay", delay)?)),
            (None, Some(deadline)) => Ok(Due::AtUnix(self.deadline("deadline", deadline)?)),
            (None, None) => Err(TimerError::invalid(
                "delay",
                "one of delay or deadline is required",
            )),
        }
    }

    /// A payload within `--max-payload-bytes`. Not copied: the decoded `Bytes` shares the
    /// request's buffer, which lives only as long as the call, since no backend keeps a
    /// `NewTimer`'s payload (the table copies it into its record, the one copy a pending
    /// timer keeps; a replica writes it to the database). Copying here too would be one
    /// more whole copy of every registration's payload at its peak.
    fn payload(&self, payload: &bytes::Bytes) -> Result<bytes::Bytes, TimerError> {
        if payload.len() > self.max_payload_bytes {
            return Err(TimerError::ResourceExhausted(format!(
                "payload: {} bytes is over the limit of {} (--max-payload-bytes)",
                payload.len(),
                self.max_payload_bytes
            )));
        }
        Ok(payload.clone())
    }

    /// A wall-clock deadline in nanoseconds since the epoch; past ones are allowed (they
    /// fire at once), ones beyond the horizon are not.
    fn deadline(&self, field: &'static str, timestamp: &Timestamp) -> Result<u64, TimerError> {
        if !(0..1_000_000_000).contains(&timestamp.nanos) {
            return Err(TimerError::invalid(field, "nanos must be within 0..1e9"));
        }
        let unix = i128::from(timestamp.seconds) * 1_000_000_000 + i128::from(timestamp.nanos);
        let horizon = unix_now() as i128 + self.max_horizon.as_nanos() as i128;
        if unix > horizon {
            return Err(TimerError::invalid(
                field,
                format!("more than {:?} in the future", self.max_horizon),
            ));
        }
        Ok(unix.max(0) as u64)
    }
}

/// The calendar of a spec's `cron` and `time_zone`, if it has one.
fn calendar(cron: &str, time_zone: &str) -> Result<Option<Calendar>, TimerError> {
    if cron.is_empty() {
        if !time_zone.is_empty() {
            return Err(TimerError::invalid("time_zone", "is only read with cron"));
        }
        return Ok(None);
    }
    match CalendarSchedule::parse(cron, time_zone) {
        Ok(schedule) => Ok(Some(Calendar(Arc::new(schedule)))),
        Err(error) => {
            // The error's text starts with its field's name, which the status repeats.
            let text = error.to_string();
            let prefix = format!("{}: ", error.field());
            let reason = text.strip_prefix(&prefix).unwrap_or(&text);
            Err(TimerError::invalid(error.field(), reason))
        }
    }
}
