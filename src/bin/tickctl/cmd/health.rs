//! `tickctl health`: asks tickd's standard gRPC health service about a service (tickd's Timers
//! by default); prints its serving status, and exits 1 unless it is SERVING.

use std::process::ExitCode;

use clap::Args;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::HealthCheckRequest;

use crate::failure::{Failure, EXIT_REFUSED};
use crate::output;
use crate::session::Session;

/// Ask tickd's standard gRPC health service whether it is serving.
#[derive(Debug, Args)]
pub(crate) struct Health {
    /// Service to ask about (empty: the server as a whole).
    #[arg(long, default_value = "tickd.v1.Timers")]
    service: String,
}

impl Health {
    pub(crate) async fn run(self, session: &Session) -> Result<ExitCode, Failure> {
        let request = session.request(HealthCheckRequest {
            service: self.service.clone(),
        });
        let answer = session.unary(session.health_api().check(request)).await?;
        let status = ServingStatus::try_from(answer.status).unwrap_or(ServingStatus::Unknown);
        let status_name = status.as_str_name();
        if session.wants_json() {
            output::print_message(&answer);
        } else {
            output::print_line(status_name);
        }
        // A probe in a script needs the answer in the exit code, not only on stdout.
        Ok(if status == ServingStatus::Serving {
            ExitCode::SUCCESS
        } else {
            ExitCode::from(EXIT_REFUSED)
        })
    }
}
