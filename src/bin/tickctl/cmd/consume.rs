//! `tickctl consume`: takes expirations of a namespace as one of its sharing subscribers,
//! printing each and then acknowledging it (unless the server acknowledges on sending, with
//! `--auto-ack`, or the caller will, with `--no-ack` and `tickctl ack`); across tickd
//! restarts, unless `--no-reconnect`.

use std::process::ExitCode;
use std::time::Duration;

use clap::Args;

use super::ack::acknowledge;
use crate::failure::{grpc_code_name, one_line, Failure};
use crate::proto_time::to_proto_duration;
use crate::session::Session;
use crate::streaming::{print_expiration, ExpirationStream, StreamArgs};
use crate::values::duration;
use tickd::proto::{subscribe_request, Expiration, SubscribeRequest};

/// Take expirations as a sharing subscriber, print and acknowledge each.
#[derive(Debug, Args)]
pub(crate) struct Consume {
    #[command(flatten)]
    stream: StreamArgs,
    /// Time to acknowledge before a delivery is made again (default: the server's).
    #[arg(long, value_parser = duration, allow_hyphen_values = true)]
    ack_timeout: Option<Duration>,
    /// Unacknowledged deliveries held at once (default: the server's).
    #[arg(long)]
    max_unacked: Option<u32>,
    /// Ask the server to count deliveries as acknowledged when sent (at-most-once).
    #[arg(long, conflicts_with = "no_ack")]
    auto_ack: bool,
    /// Print deliveries without acknowledging them: acknowledge each with `tickctl ack -n
    /// NAMESPACE DELIVERY_ID` while this runs, within --ack-timeout; what is not acknowledged
    /// is delivered again (also when consume stops).
    #[arg(long)]
    no_ack: bool,
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
            ExpirationStream::open(session, request, &self.stream, "consuming").await?;
        while let Some(expiration) = expirations.next().await? {
            // Printed before the ack: a delivery that is acknowledged has been shown.
            print_expiration(session, &expiration);
            if !self.auto_ack && !self.no_ack {
                acknowledge_delivery(session, &expiration).await?;
            }
        }
        Ok(ExitCode::SUCCESS)
    }
}

/// Acknowledges one delivery. One no longer awaiting its ack (it took longer than the ack
/// timeout), or an ack lost because tickd went away, is only a warning: the server delivers
/// it again, and the stream subscribes again if the server is gone.
async fn acknowledge_delivery(session: &Session, expiration: &Expiration) -> Result<(), Failure> {
    // The delivery belongs to the timer's namespace; --namespace only if no timer came with it.
    let namespace = expiration
        .timer
        .as_ref()
        .map(|timer| timer.namespace.clone())
        .unwrap_or_else(|| session.namespace().to_owned());
    let delivery_id = &expiration.delivery_id;
    match acknowledge(session, namespace, vec![delivery_id.clone()]).await {
        Ok(answer) if answer.unknown.is_empty() => {}
        Ok(_) => eprintln!(
            "tickctl: delivery {delivery_id} was no longer awaiting an ack (it will be delivered again)"
        ),
        Err(Failure::Status(status)) if status.code() == tonic::Code::Unavailable => eprintln!(
            "tickctl: delivery {delivery_id} not acknowledged ({}: {}); it will be delivered again",
            grpc_code_name(status.code()),
            one_line(status.message())
        ),
        Err(failure) => return Err(failure),
    }
    Ok(())
}
