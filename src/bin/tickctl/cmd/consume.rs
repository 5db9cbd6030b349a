//! `tickctl consume`: takes expirations of a namespace as one of its sharing subscribers,
//! printing each and then acknowledging it (unless the server acknowledges on sending, with
//! `--auto-ack`).

use std::process::ExitCode;
use std::time::Duration;

use clap::Args;

use super::ack::acknowledge;
use crate::failure::Failure;
use crate::proto_time::to_proto_duration;
use crate::session::Session;
use crate::streaming::{print_expiration, ExpirationStream};
use crate::values::duration;
use tickd::proto::{subscribe_request, Expiration, SubscribeRequest};

/// Take expirations as a sharing subscriber, print and acknowledge each.
#[derive(Debug, Args)]
pub(crate) struct Consume {
    /// Stop after this many expirations (default: until Ctrl-C).
    #[arg(long)]
    count: Option<u64>,
    /// Time to acknowledge before a delivery is made again (default: the server's).
    #[arg(long, value_parser = duration)]
    ack_timeout: Option<Duration>,
    /// Unacknowledged deliveries held at once (default: the server's).
    #[arg(long)]
    max_unacked: Option<u32>,
    /// Ask the server to count deliveries as acknowledged when sent (at-most-once).
    #[arg(long)]
    auto_ack: bool,
}

impl Consume {
    pub(crate) async fn run(self, session: &Session) -> Result<ExitCode, Failure> {
        let request = SubscribeRequest {
            namespace: session.namespace().to_owned(),
            mode: subscribe_request::Mode::Shared as i32,
            ack_timeout: self.ack_timeout.map(to_proto_duration),
            max_unacked: self.max_unacked.unwrap_or(0),
            auto_ack: self.auto_ack,
        };
        let mut expirations =
            ExpirationStream::open(session, request, self.count, "consuming").await?;
        while let Some(expiration) = expirations.next().await? {
            // Printed before the ack: a delivery that is acknowledged has been shown.
            print_expiration(session, &expiration);
            if !self.auto_ack {
                acknowledge_delivery(session, &expiration).await?;
            }
        }
        Ok(ExitCode::SUCCESS)
    }
}

/// Acknowledges one delivery; one no longer awaiting its ack (it took longer than the ack
/// timeout) is only a warning, as the server will deliver it again.
async fn acknowledge_delivery(session: &Session, expiration: &Expiration) -> Result<(), Failure> {
    // The delivery belongs to the timer's namespace; --namespace only if no timer came with it.
    let namespace = expiration
        .timer
        .as_ref()
        .map(|timer| timer.namespace.clone())
        .unwrap_or_else(|| session.namespace().to_owned());
    let answer = acknowledge(session, namespace, vec![expiration.delivery_id.clone()]).await?;
    if !answer.unknown.is_empty() {
        eprintln!(
            "tickctl: delivery {} was no longer awaiting an ack (it will be delivered again)",
            expiration.delivery_id
        );
    }
    Ok(())
}
