//! What the long-running subcommands share: stopping cleanly on Ctrl-C (keepalive, watch,
//! consume) and reading the expirations of a Subscribe stream up to `--count` (watch,
//! consume), subscribing again with back-off when tickd restarts or the connection drops.

use std::time::Duration;

use clap::Args;
use tonic::{Code, Status, Streaming};

use crate::failure::{grpc_code_name, one_line, Failure};
use crate::output;
use crate::session::Session;
use tickd::proto::{Expiration, SubscribeRequest, SubscribeResponse};

/// Resolves on Ctrl-C (or never, if the signal cannot be listened for), so a command can end
/// with exit 0 instead of being killed mid-line.
pub(crate) async fn interrupted() {
    if tokio::signal::ctrl_c().await.is_err() {
        std::future::pending::<()>().await;
    }
}

/// The first wait before subscribing again, doubled after each failed try up to the longest.
const FIRST_RETRY_DELAY: Duration = Duration::from_millis(100);
const LONGEST_RETRY_DELAY: Duration = Duration::from_secs(5);

/// `watch`'s and `consume`'s flags for how long they run.
#[derive(Debug, Args)]
pub(crate) struct StreamArgs {
    /// Stop after this many expirations (default: until Ctrl-C).
    #[arg(long)]
    count: Option<u64>,
    /// Exit when the stream breaks (tickd restarting, the connection lost) instead of
    /// subscribing again with back-off.
    #[arg(long)]
    no_reconnect: bool,
}

/// An open Subscribe stream that yields expirations until `--count` of them were taken or
/// Ctrl-C is pressed, and that subscribes again when it breaks for a reason that may pass.
pub(crate) struct ExpirationStream<'session> {
    session: &'session Session,
    request: SubscribeRequest,
    announcement: &'static str,
    stream: Streaming<SubscribeResponse>,
    count: Option<u64>,
    reconnect: bool,
    taken: u64,
}

impl<'session> ExpirationStream<'session> {
    /// Subscribes and waits until the server has registered the subscriber, then says so on
    /// stderr: expirations from that moment on are delivered (scripts and tests wait for it).
    pub(crate) async fn open(
        session: &'session Session,
        request: SubscribeRequest,
        args: &StreamArgs,
        announcement: &'static str,
    ) -> Result<Self, Failure> {
        let stream = subscribe(session, &request, announcement).await?;
        Ok(ExpirationStream {
            session,
            request,
            announcement,
            stream,
            count: args.count,
            reconnect: !args.no_reconnect,
            taken: 0,
        })
    }

    /// The next expiration; None once `--count` were taken or on Ctrl-C.
    pub(crate) async fn next(&mut self) -> Result<Option<Expiration>, Failure> {
        if self.count.is_some_and(|count| self.taken >= count) {
            return Ok(None);
        }
        loop {
            let message = tokio::select! {
                message = self.stream.message() => message,
                _ = interrupted() => return Ok(None),
            };
            let status = match message {
                Ok(Some(SubscribeResponse {
                    expiration: Some(expiration),
                })) => {
                    self.taken += 1;
                    return Ok(Some(expiration));
                }
                Ok(Some(_)) => {
                    return Err(Failure::Other(
                        "the server sent an empty Subscribe message".into(),
                    ))
                }
                Ok(None) => Status::unavailable("the server closed the Subscribe stream"),
                Err(status) => status,
            };
            if !self.reconnect || !may_pass(&status) {
                return Err(Failure::Status(status));
            }
            match self.resubscribe(status).await? {
                Some(stream) => self.stream = stream,
                None => return Ok(None),
            }
        }
    }

    /// Subscribes again, waiting longer after each failed try; None on Ctrl-C. A refusal
    /// that will not pass by waiting (a revoked token, say) ends the command.
    async fn resubscribe(
        &self,
        mut status: Status,
    ) -> Result<Option<Streaming<SubscribeResponse>>, Failure> {
        let mut delay = FIRST_RETRY_DELAY;
        loop {
            eprintln!(
                "tickctl: subscription lost ({}: {}); subscribing again in {}",
                grpc_code_name(status.code()),
                one_line(status.message()),
                humantime::format_duration(delay)
            );
            tokio::select! {
                _ = tokio::time::sleep(delay) => {}
                _ = interrupted() => return Ok(None),
            }
            match subscribe(self.session, &self.request, self.announcement).await {
                Ok(stream) => return Ok(Some(stream)),
                Err(Failure::Status(refused)) if may_pass(&refused) => status = refused,
                Err(failure) => return Err(failure),
            }
            delay = (delay * 2).min(LONGEST_RETRY_DELAY);
        }
    }
}

/// Opens the Subscribe stream and announces it on stderr.
async fn subscribe(
    session: &Session,
    request: &SubscribeRequest,
    announcement: &str,
) -> Result<Streaming<SubscribeResponse>, Failure> {
    let mut timers = session.timers_api();
    let stream = session
        .open_stream("Subscribe", timers.subscribe(request.clone()))
        .await?;
    eprintln!(
        "tickctl: {announcement} namespace {}; Ctrl-C to stop",
        session.namespace_shown()
    );
    Ok(stream)
}

/// Whether a broken stream may work again after a wait: tickd stopping or restarting, the
/// connection lost or reset, the server too busy for one more subscriber. Not a refusal of
/// the request itself (a bad namespace, a token without the namespace).
fn may_pass(status: &Status) -> bool {
    matches!(
        status.code(),
        Code::Unavailable
            | Code::Unknown
            | Code::Cancelled
            | Code::Aborted
            | Code::Internal
            | Code::DeadlineExceeded
            | Code::ResourceExhausted
    )
}

/// One expiration as one stdout line: `fired ...` text, or a compact JSON object per line so
/// that `--output json` streams stay line-delimited.
pub(crate) fn print_expiration(session: &Session, expiration: &Expiration) {
    if session.wants_json() {
        output::print_message_line(expiration);
    } else {
        output::print_line(output::expiration_line(expiration));
    }
}
