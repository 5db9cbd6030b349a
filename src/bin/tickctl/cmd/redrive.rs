//! `tickctl redrive`: sends a namespace's dead expirations back to delivery (Redrive), the
//! ones named by delivery id (as `pending --dead` lists them) or all of them; prints how many
//! went back, and exits 1 when some ids named were not dead.
//!
//! One Redrive call takes at most [`MAX_REDRIVE`]: named ids go in calls of that many, and
//! "all of them" is calls until one sends back fewer (redriven ones leave the dead list, so
//! each call takes the next oldest), at most [`MAX_CALLS`] of them.

use std::process::ExitCode;

use clap::Args;

use crate::failure::{Failure, EXIT_REFUSED};
use crate::output;
use crate::session::Session;
use tickd::domain::MAX_REDRIVE;
use tickd::proto::{RedriveRequest, RedriveResponse};

/// Send dead expirations back to delivery, their attempts counted afresh.
#[derive(Debug, Args)]
pub(crate) struct Redrive {
    /// Delivery ids of dead expirations, as `pending --dead` lists them (none: all of the
    /// namespace's dead expirations, in as many calls as that takes).
    delivery_ids: Vec<String>,
}

/// Calls one "all of them" redrive makes at most: while expirations keep dying as fast as
/// they are redriven, it stops after this many (a million expirations) rather than never.
const MAX_CALLS: usize = 1_000;

impl Redrive {
    pub(crate) async fn run(self, session: &Session) -> Result<ExitCode, Failure> {
        let mut answer = RedriveResponse::default();
        if self.delivery_ids.is_empty() {
            for _ in 0..MAX_CALLS {
                let redriven = call(session, Vec::new()).await?.redriven;
                answer.redriven += redriven;
                if (redriven as usize) < MAX_REDRIVE {
                    break;
                }
            }
        } else {
            for ids in self.delivery_ids.chunks(MAX_REDRIVE) {
                let part = call(session, ids.to_vec()).await?;
                answer.redriven += part.redriven;
                answer.not_dead.extend(part.not_dead);
            }
        }
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

/// One Redrive call.
async fn call(session: &Session, delivery_ids: Vec<String>) -> Result<RedriveResponse, Failure> {
    let request = session.request(RedriveRequest {
        namespace: session.namespace().to_owned(),
        delivery_ids,
    });
    session.unary(session.timers_api().redrive(request)).await
}
