//! What the long-running subcommands share: stopping cleanly on Ctrl-C (keepalive, watch,
//! consume) and reading the expirations of a Subscribe stream up to `--count` (watch, consume).

use tonic::{Status, Streaming};

use crate::failure::Failure;
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

/// An open Subscribe stream that yields expirations until `--count` of them were taken or
/// Ctrl-C is pressed.
pub(crate) struct ExpirationStream {
    stream: Streaming<SubscribeResponse>,
    count: Option<u64>,
    taken: u64,
}

impl ExpirationStream {
    /// Subscribes and waits until the server has registered the subscriber, then says so on
    /// stderr: expirations from that moment on are delivered (scripts and tests wait for it).
    pub(crate) async fn open(
        session: &Session,
        request: SubscribeRequest,
        count: Option<u64>,
        announcement: &str,
    ) -> Result<Self, Failure> {
        let mut timers = session.timers_api();
        let stream = session
            .open_stream("Subscribe", timers.subscribe(request))
            .await?;
        eprintln!(
            "tickctl: {announcement} namespace {}; Ctrl-C to stop",
            session.namespace_shown()
        );
        Ok(ExpirationStream {
            stream,
            count,
            taken: 0,
        })
    }

    /// The next expiration; None once `--count` were taken or on Ctrl-C.
    pub(crate) async fn next(&mut self) -> Result<Option<Expiration>, Failure> {
        if self.count.is_some_and(|count| self.taken >= count) {
            return Ok(None);
        }
        let expiration = tokio::select! {
            message = self.stream.message() => expiration_of(message)?,
            _ = interrupted() => return Ok(None),
        };
        self.taken += 1;
        Ok(Some(expiration))
    }
}

fn expiration_of(
    message: Result<Option<SubscribeResponse>, Status>,
) -> Result<Expiration, Failure> {
    message?
        .ok_or_else(|| Failure::Other("the server closed the Subscribe stream".into()))?
        .expiration
        .ok_or_else(|| Failure::Other("the server sent an empty Subscribe message".into()))
}

/// One expiration as one stdout line: `fired ...` text, or a compact JSON object per line so
/// that `--output json` streams stay line-delimited.
pub(crate) fn print_expiration(session: &Session, expiration: &Expiration) {
    if session.wants_json() {
        output::print_json_line(&output::expiration_json(expiration));
    } else {
        output::print_line(output::expiration_line(expiration));
    }
}
