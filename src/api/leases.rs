//! Leases: Touch, which moves a timer's deadline to now plus its ttl, and KeepAlive, a
//! stream of such heartbeats. Each heartbeat is handed to the backend as soon as it is
//! read, without waiting for the previous one's answer, and the answers go back in arrival
//! order.

use std::time::Duration;

use prost_types::Duration as ProtoDuration;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tokio_stream::StreamExt;
use tonic::{Request, Response, Status, Streaming};

use super::auth::{grant_of, Grant};
use super::service::{connection_streams, BoxStream, TimersService};
use super::status::item_error;
use super::streams::StreamKind;
use crate::convert::{self, Limits};
use crate::domain::{Answer, TimerError, TimerView};
use crate::proto;

/// Heartbeats a KeepAlive stream may have waiting on the backend at once. Generous, so that
/// the stream is read as fast as heartbeats arrive even while a group commit is under way:
/// HTTP/2 (the h2 crate) ends a connection whose peer has many small DATA frames waiting
/// unread. Past it, reading pauses and flow control slows the client (see
/// `server::transport::http2_server`).
const KEEPALIVE_IN_FLIGHT: usize = 4_096;

pub(super) async fn touch(
    service: &TimersService,
    request: Request<proto::TouchRequest>,
) -> Result<Response<proto::TouchResponse>, Status> {
    let grant = grant_of(&request);
    let request = request.into_inner();
    let timer = service.authorized_ref(&grant, request.timer)?;
    let ttl = service.limits.optional_ttl(request.ttl.as_ref())?;
    let view = service.timers.touch(timer, ttl).await?;
    Ok(Response::new(proto::TouchResponse {
        timer: Some(convert::timer(view)),
    }))
}

pub(super) async fn keep_alive(
    service: &TimersService,
    request: Request<Streaming<proto::KeepAliveRequest>>,
) -> Result<Response<BoxStream<proto::KeepAliveResponse>>, Status> {
    let grant = grant_of(&request);
    let permit = service
        .streams
        .acquire(StreamKind::KeepAlive, connection_streams(&request))?;
    let heartbeats = request.into_inner();
    let (answers, pending_answers) = mpsc::channel(KEEPALIVE_IN_FLIGHT);
    tokio::spawn(
        service
            .clone()
            .forward_heartbeats(heartbeats, grant, answers),
    );
    let responses = ReceiverStream::new(pending_answers).then(move |answer: PendingAnswer| {
        // The stream's place is given back when the response stream ends.
        let _permit = &permit;
        answer.resolve()
    });
    Ok(Response::new(Box::pin(responses)))
}

impl Limits {
    /// A heartbeat's new ttl, if it gives one (else the timer keeps its own).
    fn optional_ttl(&self, ttl: Option<&ProtoDuration>) -> Result<Option<Duration>, TimerError> {
        ttl.map(|ttl| self.interval("ttl", ttl)).transpose()
    }
}

/// One heartbeat on its way through the worker, answered in arrival order.
enum PendingAnswer {
    Waiting {
        sequence: u64,
        answer: Answer<TimerView>,
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
                (sequence, answer.await.map_err(Status::from))
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
                error: Some(item_error(&status)),
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
                    status: error.into(),
                }
            }
        };
        // The heartbeat is under way once `touch` returns (see `domain::Answer`): the next
        // one is read while this one is applied.
        PendingAnswer::Waiting {
            sequence,
            answer: self.timers.touch(timer, ttl),
        }
    }
}
