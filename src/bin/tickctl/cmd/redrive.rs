//! `tickctl redrive`: sends a namespace's dead expirations back to delivery (Redrive), the
//! ones named by delivery id (as `pending --dead` lists them) or all of them; prints how many
//! went back, and exits 1 when some ids named were not dead.

use std::process::ExitCode;

use clap::Args;

use crate::failure::{Failure, EXIT_REFUSED};
use crate::output;
use crate::session::Session;
use tickd::proto::RedriveRequest;

/// Send dead expirations back to delivery, their attempts counted afresh.
#[derive(Debug, Args)]
pub(crate) struct Redrive {
    /// Delivery ids of dead expirations, as `pending --dead` lists them (none: all of the
    /// namespace's dead expirations).
    delivery_ids: Vec<String>,
}

impl Redrive {
    pub(crate) async fn run(self, session: &Session) -> Result<ExitCode, Failure> {
        let request = session.request(RedriveRequest {
            namespace: session.namespace().to_owned(),
            delivery_ids: self.delivery_ids,
        });
        let answer = session.unary(session.timers_api().redrive(request)).await?;
        if session.wants_json() {
            output::print_message(&answer);
        } else {
            output::print_line(format!("redriven {}", answer.redriven));
        }
        if !answer.not_dead.is_empty() {
            eprintln!(
                "tickctl: not dead expirations of the namespace: {}",
                answer.not_dead.join(", ")
            );
            return Ok(ExitCode::from(EXIT_REFUSED));
        }
        Ok(ExitCode::SUCCESS)
    }
}
