//! `tickctl get`: shows one pending timer, by id or `--key`, with the time it has left; and
//! the printing of one timer that `touch` (and the timer check of `add`) share.

use std::process::ExitCode;

use clap::Args;

use crate::failure::Failure;
use crate::output;
use crate::session::Session;
use crate::target::Target;
use tickd::proto::{GetRequest, Timer};

/// Show one pending timer and the time it has left.
#[derive(Debug, Args)]
pub(crate) struct Get {
    #[command(flatten)]
    target: Target,
}

impl Get {
    pub(crate) async fn run(self, session: &Session) -> Result<ExitCode, Failure> {
        let request = session.request(GetRequest {
            timer: self.target.timer_ref(session.namespace()),
        });
        let answer = session.unary(session.timers_api().get(request)).await?;
        print_timer(session, answer.timer)
    }
}

/// The timer a successful answer must carry: without one the server broke the API (exit 1).
pub(crate) fn timer_of_answer(timer: Option<Timer>) -> Result<Timer, Failure> {
    timer.ok_or_else(|| Failure::Other("the server answered without a timer".into()))
}

/// Prints a timer as `key: value` lines, or as one pretty JSON object.
pub(crate) fn print_timer(session: &Session, timer: Option<Timer>) -> Result<ExitCode, Failure> {
    let timer = timer_of_answer(timer)?;
    if session.wants_json() {
        output::print_message(&timer);
    } else {
        output::print_line(output::timer_details(&timer));
    }
    Ok(ExitCode::SUCCESS)
}
