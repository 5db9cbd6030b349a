//! The tonic service: validates each request, checks the caller may use its namespace,
//! asks the backend, and turns the answer into the response. No timer logic lives here,
//! and nothing here knows which backend answers: it holds one [`Timers`] and one
//! [`Expirations`] (see [`crate::domain`]). Refusals become statuses in [`status`].
//!
//! Each handler runs in a span named after its RPC, at debug level: free unless debug
//! logging is on, and then every event of the call says which call it belongs to.

pub(crate) mod auth;
pub(crate) mod codec;
pub(crate) mod convert;
mod keepalive;
mod status;
pub(crate) mod streams;

use std::pin::Pin;
use std::sync::Arc;

use tokio::sync::{mpsc, watch};
use tokio_stream::wrappers::ReceiverStream;
use tokio_stream::{Stream, StreamExt};
use tonic::{Request, Response, Status, Streaming};
use tracing::instrument;

use crate::budget::{MemoryBudget, MemoryReservation, Refusal};
use crate::domain::{
    Expirations, PendingQuery, SubscribeOptions, TimerError, TimerRef, Timers, MAX_REDRIVE,
};
use crate::metrics::Metrics;
use crate::proto;
use auth::{grant_of, Grant};
use convert::Limits;
use keepalive::{PendingAnswer, KEEPALIVE_IN_FLIGHT};
use streams::{ConnectionStreams, StreamKind, StreamLimits};

/// Pending answers stay under 4 MiB, the receive limit of most gRPC clients: timers are
/// listed up to this many bytes (payloads and fields), then dead expirations up to the
/// rest of the response budget.
pub(crate) const PENDING_TIMER_BYTES: usize = 3 * 1024 * 1024;
const PENDING_RESPONSE_BYTES: usize = 3 * 1024 * 1024 + 512 * 1024;

#[derive(Clone)]
pub(crate) struct TimersService {
    timers: Arc<dyn Timers>,
    expirations: Arc<dyn Expirations>,
    limits: Limits,
    streams: StreamLimits,
    shutdown: watch::Receiver<bool>,
    /// Write requests are held against it while they are served (see
    /// [`Self::hold_request`]).
    memory: Arc<MemoryBudget>,
    metrics: Arc<Metrics>,
}

impl TimersService {
    pub(crate) fn new(
        timers: Arc<dyn Timers>,
        expirations: Arc<dyn Expirations>,
        limits: Limits,
        streams: streams::StreamLimitsConfig,
        shutdown: watch::Receiver<bool>,
        memory: Arc<MemoryBudget>,
        metrics: Arc<Metrics>,
    ) -> Self {
        Self {
            timers,
            expirations,
            limits,
            streams: StreamLimits::new(streams),
            shutdown,
            memory,
            metrics,
        }
    }

    /// Holds a request that brings new bytes (a registration, a new payload) against the
    /// memory budget until it is answered: the write path's buffers in flight (the decoded
    /// request, its payloads on their way to the table and the log) count with what is
    /// held, so many large requests at once are refused instead of adding up past the
    /// budget. Refused, the request goes no further.
    fn hold_request<T: prost::Message>(
        &self,
        request: &Request<T>,
    ) -> Result<MemoryReservation, TimerError> {
        let bytes = request.get_ref().encoded_len() as u64;
        self.memory.try_reserve(bytes).map_err(|exhausted| {
            self.metrics.budgets.refused(Refusal::Memory);
            TimerError::from(exhausted)
        })
    }

    /// Validates a timer reference and checks the caller may use its namespace.
    fn authorized_ref(
        &self,
        grant: &Grant,
        reference: Option<proto::TimerRef>,
    ) -> Result<TimerRef, TimerError> {
        let timer = self.limits.timer_ref(reference)?;
        grant.check(Some(&timer.namespace))?;
        Ok(timer)
    }
}

/// A backend answered a batch with fewer items than it was given: it stopped mid-way.
fn unanswered() -> TimerError {
    TimerError::Unavailable("the backend answered no result for this item".into())
}

/// The stream counters of the connection a request came on (see `server::calls`).
fn connection_streams<T>(request: &Request<T>) -> Option<&Arc<ConnectionStreams>> {
    request.extensions().get::<Arc<ConnectionStreams>>()
}

type BoxStream<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send + 'static>>;

#[tonic::async_trait]
impl proto::timers_server::Timers for TimersService {
    #[instrument(level = "debug", name = "NewTimeout", skip_all)]
    async fn new_timeout(
        &self,
        request: Request<proto::NewTimeoutRequest>,
    ) -> Result<Response<proto::NewTimeoutResponse>, Status> {
        let grant = grant_of(&request);
        let _in_flight = self.hold_request(&request)?;
        let spec = request
            .into_inner()
            .timer
            .ok_or_else(|| TimerError::invalid("timer", "is required"))?;
        let timer = self.limits.new_timer(spec)?;
        grant.check(Some(&timer.namespace))?;
        let registered = self
            .timers
            .register(vec![timer])
            .await?
            .pop()
            .ok_or_else(unanswered)??;
        Ok(Response::new(proto::NewTimeoutResponse {
            timer: Some(convert::registered_timer(registered.timer)),
            created: registered.created,
            replaced: registered.replaced,
        }))
    }

    #[instrument(level = "debug", name = "NewTimeouts", skip_all)]
    async fn new_timeouts(
        &self,
        request: Request<proto::NewTimeoutsRequest>,
    ) -> Result<Response<proto::NewTimeoutsResponse>, Status> {
        let grant = grant_of(&request);
        let _in_flight = self.hold_request(&request)?;
        let specs = request.into_inner().timers;
        if specs.len() > self.limits.max_batch {
            return Err(Status::resource_exhausted(format!(
                "timers: {} items is over the batch limit of {} (--max-batch)",
                specs.len(),
                self.limits.max_batch
            )));
        }
        // Invalid items are answered here; only the valid ones go to the worker.
        let validated: Vec<_> = specs
            .into_iter()
            .map(|spec| {
                let timer = self.limits.new_timer(spec)?;
                grant.check(Some(&timer.namespace))?;
                Ok(timer)
            })
            .collect();
        let valid = validated
            .iter()
            .filter_map(|item| item.as_ref().ok())
            .cloned()
            .collect();
        let mut registered = self.timers.register(valid).await?.into_iter();
        let results = validated
            .into_iter()
            .map(|item| {
                let outcome = item.and_then(|_| registered.next().ok_or_else(unanswered)?);
                let result = match outcome {
                    Ok(registered) => {
                        proto::new_timeout_result::Result::Registered(proto::NewTimeoutResponse {
                            timer: Some(convert::registered_timer(registered.timer)),
                            created: registered.created,
                            replaced: registered.replaced,
                        })
                    }
                    Err(error) => {
                        proto::new_timeout_result::Result::Error(convert::item_error(&error))
                    }
                };
                proto::NewTimeoutResult {
                    result: Some(result),
                }
            })
            .collect();
        Ok(Response::new(proto::NewTimeoutsResponse { results }))
    }

    #[instrument(level = "debug", name = "Cancel", skip_all)]
    async fn cancel(
        &self,
        request: Request<proto::CancelRequest>,
    ) -> Result<Response<proto::CancelResponse>, Status> {
        let grant = grant_of(&request);
        let timer = self.authorized_ref(&grant, request.into_inner().timer)?;
        let cancelled = self.timers.cancel(timer).await?;
        Ok(Response::new(proto::CancelResponse { cancelled }))
    }

    #[instrument(level = "debug", name = "Pending", skip_all)]
    async fn pending(
        &self,
        request: Request<proto::PendingRequest>,
    ) -> Result<Response<proto::PendingResponse>, Status> {
        let grant = grant_of(&request);
        let request = request.into_inner();
        let namespace = match request.namespace.as_str() {
            "" => None,
            name => Some(self.limits.namespace(name)?),
        };
        grant.check(namespace.as_deref())?;
        let after = match request.page_token.as_str() {
            "" => None,
            token => Some(token.parse::<crate::domain::PageToken>()?),
        };
        let query = PendingQuery {
            namespace: namespace.clone(),
            page_size: (request.page_size as usize).min(self.limits.max_page_size),
            max_bytes: PENDING_TIMER_BYTES,
            after,
        };
        let page = self.timers.pending(query).await?;
        // With no namespace (a caller allowed every one), every namespace's dead.
        let dead = self.expirations.dead(namespace).await?;
        let timers: Vec<proto::Timer> = page.timers.into_iter().map(convert::timer).collect();
        let mut budget = PENDING_RESPONSE_BYTES.saturating_sub(
            timers
                .iter()
                .map(prost::Message::encoded_len)
                .sum::<usize>(),
        );
        let dead_expirations = if request.include_dead {
            dead.dead
                .iter()
                .map(convert::dead_expiration)
                .take_while(|expiration| {
                    let size = prost::Message::encoded_len(expiration) + 8;
                    budget.checked_sub(size).map(|rest| budget = rest).is_some()
                })
                .collect()
        } else {
            Vec::new()
        };
        Ok(Response::new(proto::PendingResponse {
            count: page.count,
            timers,
            next_page_token: page
                .next_page_token
                .map(|token| token.to_string())
                .unwrap_or_default(),
            dead_count: dead.count,
            dead_expirations,
        }))
    }

    #[instrument(level = "debug", name = "Get", skip_all)]
    async fn get(
        &self,
        request: Request<proto::GetRequest>,
    ) -> Result<Response<proto::GetResponse>, Status> {
        let grant = grant_of(&request);
        let timer = self.authorized_ref(&grant, request.into_inner().timer)?;
        let view = self.timers.get(timer).await?;
        Ok(Response::new(proto::GetResponse {
            timer: Some(convert::timer(view)),
        }))
    }

    #[instrument(level = "debug", name = "Touch", skip_all)]
    async fn touch(
        &self,
        request: Request<proto::TouchRequest>,
    ) -> Result<Response<proto::TouchResponse>, Status> {
        let grant = grant_of(&request);
        let request = request.into_inner();
        let timer = self.authorized_ref(&grant, request.timer)?;
        let ttl = self.limits.optional_ttl(request.ttl.as_ref())?;
        let view = self.timers.touch(timer, ttl).await?;
        Ok(Response::new(proto::TouchResponse {
            timer: Some(convert::timer(view)),
        }))
    }

    type KeepAliveStream = BoxStream<proto::KeepAliveResponse>;

    #[instrument(level = "debug", name = "KeepAlive", skip_all)]
    async fn keep_alive(
        &self,
        request: Request<Streaming<proto::KeepAliveRequest>>,
    ) -> Result<Response<Self::KeepAliveStream>, Status> {
        let grant = grant_of(&request);
        let permit = self
            .streams
            .acquire(StreamKind::KeepAlive, connection_streams(&request))?;
        let heartbeats = request.into_inner();
        let (answers, pending_answers) = mpsc::channel(KEEPALIVE_IN_FLIGHT);
        tokio::spawn(self.clone().forward_heartbeats(heartbeats, grant, answers));
        let responses = ReceiverStream::new(pending_answers).then(move |answer: PendingAnswer| {
            // The stream's place is given back when the response stream ends.
            let _permit = &permit;
            answer.resolve()
        });
        Ok(Response::new(Box::pin(responses)))
    }

    type SubscribeStream = BoxStream<proto::SubscribeResponse>;

    #[instrument(level = "debug", name = "Subscribe", skip_all)]
    async fn subscribe(
        &self,
        request: Request<proto::SubscribeRequest>,
    ) -> Result<Response<Self::SubscribeStream>, Status> {
        let grant = grant_of(&request);
        let connection = connection_streams(&request).cloned();
        let request = request.into_inner();
        let namespace = self.limits.namespace(&request.namespace)?;
        grant.check(Some(&namespace))?;
        let ack_timeout = match &request.ack_timeout {
            Some(timeout) => Some(self.limits.duration("ack_timeout", timeout)?)
                .filter(|timeout| !timeout.is_zero()),
            None => None,
        };
        let options = SubscribeOptions {
            namespace,
            observer: request.mode == proto::subscribe_request::Mode::Observer as i32,
            ack_timeout,
            max_unacked: (request.max_unacked > 0).then_some(request.max_unacked as usize),
            auto_ack: request.auto_ack,
        };
        let kind = match options.observer {
            true => StreamKind::Observer,
            false => StreamKind::Subscribe,
        };
        let permit = self.streams.acquire(kind, connection.as_ref())?;
        let subscription = self.expirations.subscribe(options)?;
        let stream = subscription.map(move |delivered| {
            // The stream's place is given back when the stream ends.
            let _permit = &permit;
            Ok(proto::SubscribeResponse {
                expiration: Some(convert::expiration(&delivered)),
            })
        });
        Ok(Response::new(Box::pin(stream)))
    }

    #[instrument(level = "debug", name = "Ack", skip_all)]
    async fn ack(
        &self,
        request: Request<proto::AckRequest>,
    ) -> Result<Response<proto::AckResponse>, Status> {
        let grant = grant_of(&request);
        let request = request.into_inner();
        let namespace = self.limits.namespace(&request.namespace)?;
        grant.check(Some(&namespace))?;
        let (delivery_ids, mut unknown) = convert::parse_delivery_ids(request.delivery_ids);
        let outcome = self.expirations.ack(namespace, delivery_ids).await?;
        unknown.extend(outcome.unknown.into_iter().map(convert::delivery_id));
        Ok(Response::new(proto::AckResponse {
            acknowledged: outcome.acknowledged,
            unknown,
        }))
    }

    #[instrument(level = "debug", name = "Reschedule", skip_all)]
    async fn reschedule(
        &self,
        request: Request<proto::RescheduleRequest>,
    ) -> Result<Response<proto::RescheduleResponse>, Status> {
        let grant = grant_of(&request);
        let _in_flight = self.hold_request(&request)?;
        let request = request.into_inner();
        let timer = self.authorized_ref(&grant, request.timer)?;
        let due = self
            .limits
            .new_due(request.delay.as_ref(), request.deadline.as_ref())?;
        let payload = request
            .payload
            .map(|payload| self.limits.payload(&payload))
            .transpose()?;
        let view = self.timers.reschedule(timer, due, payload).await?;
        Ok(Response::new(proto::RescheduleResponse {
            timer: Some(convert::registered_timer(view)),
        }))
    }

    #[instrument(level = "debug", name = "Redrive", skip_all)]
    async fn redrive(
        &self,
        request: Request<proto::RedriveRequest>,
    ) -> Result<Response<proto::RedriveResponse>, Status> {
        let grant = grant_of(&request);
        let request = request.into_inner();
        let namespace = self.limits.namespace(&request.namespace)?;
        grant.check(Some(&namespace))?;
        if request.delivery_ids.len() > MAX_REDRIVE {
            return Err(Status::invalid_argument(format!(
                "delivery_ids: {} ids is over the {MAX_REDRIVE} one Redrive call takes; \
                 send them in several calls",
                request.delivery_ids.len()
            )));
        }
        let (ids, mut not_dead) = convert::parse_delivery_ids(request.delivery_ids);
        // No ids at all: the oldest dead expirations of the namespace, up to MAX_REDRIVE.
        let named = (!ids.is_empty() || !not_dead.is_empty()).then_some(ids);
        let outcome = self.expirations.redrive(namespace, named).await?;
        not_dead.extend(outcome.not_dead.into_iter().map(convert::delivery_id));
        Ok(Response::new(proto::RedriveResponse {
            redriven: outcome.redriven,
            not_dead,
        }))
    }
}
