//! `tickctl cancel`: cancels one pending timer, by id or `--key`, and says whether it was
//! still pending (either way is exit 0: the timer will not fire).

use std::process::ExitCode;

use clap::Args;

use crate::failure::Failure;
use crate::output;
use crate::session::Session;
use crate::target::Target;
use tickd::proto::CancelRequest;

/// Cancel a pending timer; says whether it was still pending.
#[derive(Debug, Args)]
pub(crate) struct Cancel {
    #[command(flatten)]
    target: Target,
}

impl Cancel {
    pub(crate) async fn run(self, session: &Session) -> Result<ExitCode, Failure> {
        let request = session.request(CancelRequest {
            timer: self.target.timer_ref(session.namespace()),
        });
        let answer = session.unary(session.timers_api().cancel(request)).await?;
        if session.wants_json() {
            output::print_message(&answer);
        } else if answer.cancelled {
            output::print_line("cancelled");
        } else {
            output::print_line("not pending (already fired or cancelled)");
        }
        Ok(ExitCode::SUCCESS)
    }
}
