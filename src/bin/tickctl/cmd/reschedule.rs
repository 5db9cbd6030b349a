//! `tickctl reschedule`: moves one pending timer's next firing (Reschedule), by id or
//! `--key`, to `--delay` from now or to `--deadline`, optionally with a new payload; then
//! shows the timer as `get` does.

use std::process::ExitCode;

use clap::Args;

use super::add::{PayloadArgs, When};
use super::get::print_timer;
use crate::failure::Failure;
use crate::proto_time::{to_proto_duration, to_proto_timestamp};
use crate::session::Session;
use crate::target::Target;
use tickd::proto::RescheduleRequest;

/// Move a pending timer's next firing (and optionally replace its payload).
#[derive(Debug, Args)]
pub(crate) struct Reschedule {
    #[command(flatten)]
    target: Target,
    #[command(flatten)]
    when: When,
    #[command(flatten)]
    payload: PayloadArgs,
}

impl Reschedule {
    pub(crate) async fn run(self, session: &Session) -> Result<ExitCode, Failure> {
        if self.when.is_empty() {
            return Err(Failure::Usage(
                "reschedule needs --delay or --deadline".into(),
            ));
        }
        let request = session.request(RescheduleRequest {
            timer: self.target.timer_ref(session.namespace()),
            delay: self.when.delay.map(to_proto_duration),
            deadline: self.when.deadline.map(to_proto_timestamp),
            payload: self.payload.read()?.map(Into::into),
        });
        let answer = session
            .unary(session.timers_api().reschedule(request))
            .await?;
        print_timer(session, answer.timer)
    }
}
