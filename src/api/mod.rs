//! The tonic service: validates each request, turns it into a worker command or a
//! delivery request, and maps every refusal to a gRPC status. No timer logic lives here.

pub mod auth;
pub mod backend;
pub mod codec;
pub mod convert;
pub mod streams;

use std::pin::Pin;

use tokio::sync::{mpsc, oneshot, watch};
use tokio_stream::wrappers::ReceiverStream;
use tokio_stream::{Stream, StreamExt};
use tonic::{Request, Response, Status, Streaming};

use crate::delivery::SubscribeOptions;
use crate::proto;
use crate::worker::table::{Command, PendingQuery, TimerError};
use crate::worker::SendError;
use auth::{grant_of, Grant};
use backend::{Deliveries, Timers};
use convert::Limits;
use streams::{ConnectionStreams, StreamKind, StreamLimits};

pub fn status(error: TimerError) -> Status {
    let message = error.to_string();
    match error {
        TimerError::InvalidArgument { .. } => Status::invalid_argument(message),
        TimerError::NotFound(_) => Status::not_found(message),
        TimerError::ResourceExhausted(_) => Status::resource_exhausted(message),
        TimerError::FailedPrecondition(_) => Status::failed_precondition(message),
        TimerError::Unavailable(_) => Status::unavailable(message),
        TimerError::PermissionDenied(_) => Status::permission_denied(message),
    }
}

fn worker_status(error: SendError) -> Status {
    match error {
        SendError::Full { .. } => Status::resource_exhausted(error.to_string()),
        SendError::Stopped => Status::unavailable(error.to_string()),
    }
}

fn stopped() -> Status {
    Status::unavailable("tickd is unavailable: shutting down, or its log failed (see its log)")
}

/// Heartbeats a KeepAlive stream may have waiting on the worker at once. Generous, so that
/// the stream is read as fast as heartbeats arrive even while a group commit is under way:
/// HTTP/2 (the h2 crate) ends a connection whose peer has many small DATA frames waiting
/// unread. Past it, reading pauses and flow control slows the client (see
/// `server::http2_settings`).
const KEEPALIVE_IN_FLIGHT: usize = 4_096;

/// Pending answers stay under 4 MiB, the receive limit of most gRPC clients: timers are
/// listed up to this many bytes (payloads and fields), then dead expirations up to the
/// rest of the response budget.
pub(crate) const PENDING_TIMER_BYTES: usize = 3 * 1024 * 1024;
const PENDING_RESPONSE_BYTES: usize = 3 * 1024 * 1024 + 512 * 1024;

#[derive(Clone)]
pub struct TimersService {
    worker: Timers,
    delivery: Deliveries,
    limits: Limits,
    streams: StreamLimits,
    shutdown: watch::Receiver<bool>,
}

impl TimersService {
    pub fn new(
        worker: Timers,
        delivery: Deliveries,
        limits: Limits,
        streams: streams::StreamLimitsConfig,
        shutdown: watch::Receiver<bool>,
    ) -> Self {
        Self {
            worker,
            delivery,
            limits,
            streams: StreamLimits::new(streams),
            shutdown,
        }
    }

    /// Validates a timer reference and checks the caller may use its namespace.
    fn authorized_ref(
        &self,
        grant: &Grant,
        reference: Option<proto::TimerRef>,
    ) -> Result<crate::worker::table::TimerRef, TimerError> {
        let timer = self.limits.timer_ref(reference)?;
        grant.check(Some(&timer.namespace))?;
        Ok(timer)
    }

    /// Sends one command built around a reply channel and waits for the answer.
    async fn ask<T>(
        &self,
        command: impl FnOnce(oneshot::Sender<T>) -> Command,
    ) -> Result<T, Status> {
        let (reply, answer) = oneshot::channel();
        self.worker
            .try_send(command(reply))
            .map_err(worker_status)?;
        answer.await.map_err(|_| stopped())
    }
}

/// The stream counters of the connection a request came on (see `server::calls`).
fn connection_streams<T>(request: &Request<T>) -> Option<&std::sync::Arc<ConnectionStreams>> {
    request
        .extensions()
        .get::<std::sync::Arc<ConnectionStreams>>()
}

type BoxStream<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send + 'static>>;

#[tonic::async_trait]
impl proto::timers_server::Timers for TimersService {
    async fn new_timeout(
        &self,
        request: Request<proto::NewTimeoutRequest>,
    ) -> Result<Response<proto::NewTimeoutResponse>, Status> {
        let grant = grant_of(&request);
        let spec = request
            .into_inner()
            .timer
            .ok_or_else(|| status(TimerError::invalid("timer", "is required")))?;
        let timer = self.limits.new_timer(spec).map_err(status)?;
        grant.check(Some(&timer.namespace)).map_err(status)?;
        let mut results = self
            .ask(|reply| Command::Register {
                timers: vec![timer],
                reply,
            })
            .await?;
        let registered = results.pop().ok_or_else(stopped)?.map_err(status)?;
        Ok(Response::new(proto::NewTimeoutResponse {
            timer: Some(convert::registered_timer(registered.timer)),
            created: registered.created,
        }))
    }

    async fn new_timeouts(
        &self,
        request: Request<proto::NewTimeoutsRequest>,
    ) -> Result<Response<proto::NewTimeoutsResponse>, Status> {
        let grant = grant_of(&request);
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
        let mut registered = self
            .ask(|reply| Command::Register {
                timers: valid,
                reply,
            })
            .await?
            .into_iter();
        let results = validated
            .into_iter()
            .map(|item| {
                let outcome = item.and_then(|_| {
                    registered
                        .next()
                        .ok_or_else(|| TimerError::Unavailable("no answer".into()))?
                });
                let result = match outcome {
                    Ok(registered) => {
                        proto::new_timeout_result::Result::Registered(proto::NewTimeoutResponse {
                            timer: Some(convert::registered_timer(registered.timer)),
                            created: registered.created,
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

    async fn cancel(
        &self,
        request: Request<proto::CancelRequest>,
    ) -> Result<Response<proto::CancelResponse>, Status> {
        let grant = grant_of(&request);
        let timer = self
            .authorized_ref(&grant, request.into_inner().timer)
            .map_err(status)?;
        let cancelled = self
            .ask(|reply| Command::Cancel { timer, reply })
            .await?
            .map_err(status)?;
        Ok(Response::new(proto::CancelResponse { cancelled }))
    }

    async fn pending(
        &self,
        request: Request<proto::PendingRequest>,
    ) -> Result<Response<proto::PendingResponse>, Status> {
        let grant = grant_of(&request);
        let request = request.into_inner();
        let namespace = match request.namespace.as_str() {
            "" => None,
            name => Some(self.limits.namespace(name).map_err(status)?),
        };
        grant.check(namespace.as_deref()).map_err(status)?;
        let after = match request.page_token.as_str() {
            "" => None,
            token => Some(token.parse().map_err(status)?),
        };
        let query = PendingQuery {
            namespace: namespace.clone(),
            page_size: (request.page_size as usize).min(self.limits.max_page_size),
            max_bytes: PENDING_TIMER_BYTES,
            after,
        };
        let page = self
            .ask(|reply| Command::Pending { query, reply })
            .await?
            .map_err(status)?;
        // With no namespace (a caller allowed every one), every namespace's dead.
        let dead = self.delivery.dead(namespace).await?;
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

    async fn get(
        &self,
        request: Request<proto::GetRequest>,
    ) -> Result<Response<proto::GetResponse>, Status> {
        let grant = grant_of(&request);
        let timer = self
            .authorized_ref(&grant, request.into_inner().timer)
            .map_err(status)?;
        let view = self
            .ask(|reply| Command::Get { timer, reply })
            .await?
            .map_err(status)?;
        Ok(Response::new(proto::GetResponse {
            timer: Some(convert::timer(view)),
        }))
    }

    async fn touch(
        &self,
        request: Request<proto::TouchRequest>,
    ) -> Result<Response<proto::TouchResponse>, Status> {
        let grant = grant_of(&request);
        let request = request.into_inner();
        let timer = self.authorized_ref(&grant, request.timer).map_err(status)?;
        let ttl = self
            .limits
            .optional_ttl(request.ttl.as_ref())
            .map_err(status)?;
        let view = self
            .ask(|reply| Command::Touch { timer, ttl, reply })
            .await?
            .map_err(status)?;
        Ok(Response::new(proto::TouchResponse {
            timer: Some(convert::timer(view)),
        }))
    }

    type KeepAliveStream = BoxStream<proto::KeepAliveResponse>;

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

    async fn subscribe(
        &self,
        request: Request<proto::SubscribeRequest>,
    ) -> Result<Response<Self::SubscribeStream>, Status> {
        let grant = grant_of(&request);
        let connection = connection_streams(&request).cloned();
        let request = request.into_inner();
        let namespace = self.limits.namespace(&request.namespace).map_err(status)?;
        grant.check(Some(&namespace)).map_err(status)?;
        let ack_timeout = match &request.ack_timeout {
            Some(timeout) => Some(
                self.limits
                    .duration("ack_timeout", timeout)
                    .map_err(status)?,
            )
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
        let subscription = self.delivery.subscribe(options)?;
        let stream = subscription.map(move |delivered| {
            // The stream's place is given back when the stream ends.
            let _permit = &permit;
            Ok(proto::SubscribeResponse {
                expiration: Some(convert::expiration(&delivered)),
            })
        });
        Ok(Response::new(Box::pin(stream)))
    }

    async fn ack(
        &self,
        request: Request<proto::AckRequest>,
    ) -> Result<Response<proto::AckResponse>, Status> {
        let grant = grant_of(&request);
        let request = request.into_inner();
        let namespace = self.limits.namespace(&request.namespace).map_err(status)?;
        grant.check(Some(&namespace)).map_err(status)?;
        let mut unknown = Vec::new();
        let mut delivery_ids = Vec::with_capacity(request.delivery_ids.len());
        for text in request.delivery_ids {
            match convert::parse_delivery_id(&text) {
                Some(id) => delivery_ids.push(id),
                None => unknown.push(text),
            }
        }
        let outcome = self.delivery.ack(namespace, delivery_ids).await?;
        unknown.extend(outcome.unknown.into_iter().map(convert::delivery_id));
        Ok(Response::new(proto::AckResponse {
            acknowledged: outcome.acknowledged,
            unknown,
        }))
    }
}

/// One heartbeat on its way through the worker, answered in arrival order.
enum PendingAnswer {
    Waiting {
        sequence: u64,
        answer: oneshot::Receiver<Result<crate::worker::table::TimerView, TimerError>>,
    },
    Failed {
        sequence: u64,
        status: Status,
    },
    /// The request stream itself failed (a message over --max-request-bytes, bytes that do
    /// not decode): the call ends with that status.
    Ended(Status),
}

impl PendingAnswer {
    async fn resolve(self) -> Result<proto::KeepAliveResponse, Status> {
        let (sequence, outcome) = match self {
            PendingAnswer::Ended(status) => return Err(status),
            PendingAnswer::Waiting { sequence, answer } => {
                let outcome = match answer.await {
                    Ok(result) => result.map_err(status),
                    Err(_) => Err(stopped()),
                };
                (sequence, outcome)
            }
            PendingAnswer::Failed { sequence, status } => (sequence, Err(status)),
        };
        Ok(match outcome {
            Ok(view) => proto::KeepAliveResponse {
                sequence,
                id: view.id.to_string(),
                deadline: Some(convert::timestamp(view.deadline_unix)),
                error: None,
            },
            Err(status) => proto::KeepAliveResponse {
                sequence,
                id: String::new(),
                deadline: None,
                error: Some(proto::Error {
                    code: status.code() as i32,
                    message: status.message().to_owned(),
                }),
            },
        })
    }
}

impl TimersService {
    /// Reads heartbeats and hands each to the worker without waiting for the previous one's
    /// answer; the answers are awaited in order on the response side. Ends with the client's
    /// stream or at shutdown.
    async fn forward_heartbeats(
        self,
        mut heartbeats: Streaming<proto::KeepAliveRequest>,
        grant: Grant,
        answers: mpsc::Sender<PendingAnswer>,
    ) {
        let mut shutdown = self.shutdown.clone();
        loop {
            let heartbeat = tokio::select! {
                heartbeat = heartbeats.message() => heartbeat,
                _ = shutdown.wait_for(|stopping| *stopping) => return,
            };
            let heartbeat = match heartbeat {
                Ok(Some(heartbeat)) => heartbeat,
                Ok(None) => return,
                Err(status) => {
                    let _ = answers.send(PendingAnswer::Ended(status)).await;
                    return;
                }
            };
            let pending = self.send_heartbeat(heartbeat, &grant);
            if answers.send(pending).await.is_err() {
                return;
            }
        }
    }

    fn send_heartbeat(&self, heartbeat: proto::KeepAliveRequest, grant: &Grant) -> PendingAnswer {
        let sequence = heartbeat.sequence;
        let command = self
            .authorized_ref(grant, heartbeat.timer)
            .and_then(|timer| {
                let ttl = self.limits.optional_ttl(heartbeat.ttl.as_ref())?;
                Ok((timer, ttl))
            });
        let (timer, ttl) = match command {
            Ok(command) => command,
            Err(error) => {
                return PendingAnswer::Failed {
                    sequence,
                    status: status(error),
                }
            }
        };
        let (reply, answer) = oneshot::channel();
        match self.worker.try_send(Command::Touch { timer, ttl, reply }) {
            Ok(()) => PendingAnswer::Waiting { sequence, answer },
            Err(error) => PendingAnswer::Failed {
                sequence,
                status: worker_status(error),
            },
        }
    }
}
