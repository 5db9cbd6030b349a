//! `tickctl touch`: one heartbeat for a lease, pushing its deadline to now + its ttl (or
//! `--ttl`), then shows the timer as `get` does.

use std::process::ExitCode;
use std::time::Duration;

use clap::Args;

use super::get::print_timer;
use crate::failure::Failure;
use crate::proto_time::to_proto_duration;
use crate::session::Session;
use crate::target::Target;
use crate::values::duration;
use tickd::proto::TouchRequest;

/// Heartbeat a lease once: push its deadline to now + its ttl (or --ttl).
#[derive(Debug, Args)]
pub(crate) struct Touch {
    #[command(flatten)]
    target: Target,
    /// New ttl (default: the timer's own).
    #[arg(long, value_parser = duration, allow_hyphen_values = true)]
    ttl: Option<Duration>,
}

impl Touch {
    pub(crate) async fn run(self, session: &Session) -> Result<ExitCode, Failure> {
        let request = session.request(TouchRequest {
            timer: self.target.timer_ref(session.namespace()),
            ttl: self.ttl.map(to_proto_duration),
        });
        let answer = session.unary(session.timers_api().touch(request)).await?;
        print_timer(session, answer.timer)
    }
}
