//! `tickctl ack`: acknowledges deliveries by their delivery ids (as `consume` prints them);
//! exit 1 when some were not awaiting an ack.

use std::process::ExitCode;

use clap::Args;

use crate::failure::{Failure, EXIT_REFUSED};
use crate::output;
use crate::session::Session;
use tickd::proto::{AckRequest, AckResponse};

/// Acknowledge deliveries by their delivery ids.
#[derive(Debug, Args)]
pub(crate) struct Ack {
    /// Delivery ids, as printed by `consume`.
    #[arg(required = true)]
    delivery_ids: Vec<String>,
}

impl Ack {
    pub(crate) async fn run(self, session: &Session) -> Result<ExitCode, Failure> {
        let namespace = session.namespace().to_owned();
        let answer = acknowledge(session, namespace, self.delivery_ids).await?;
        if session.wants_json() {
            output::print_message(&answer);
        } else {
            output::print_line(format!("acknowledged {}", answer.acknowledged));
        }
        if !answer.unknown.is_empty() {
            eprintln!(
                "tickctl: not awaiting an ack (already acknowledged, redelivered, or unknown): {}",
                answer.unknown.join(", ")
            );
            return Ok(ExitCode::from(EXIT_REFUSED));
        }
        Ok(ExitCode::SUCCESS)
    }
}

/// One Ack call for deliveries of `namespace`; also how `consume` acknowledges.
pub(crate) async fn acknowledge(
    session: &Session,
    namespace: String,
    delivery_ids: Vec<String>,
) -> Result<AckResponse, Failure> {
    let request = session.request(AckRequest {
        namespace,
        delivery_ids,
    });
    session.unary(session.timers_api().ack(request)).await
}
