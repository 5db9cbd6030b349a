//! `tickctl add`: registers one timer (NewTimeout) and prints its id, or with `--output json`
//! whether it was created and the timer.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, SystemTime};

use clap::Args;
use serde_json::json;

use super::get::timer_of_answer;
use crate::cli::{duration, rfc3339};
use crate::failure::Failure;
use crate::output;
use crate::proto_time::{to_proto_duration, to_proto_timestamp};
use crate::session::Session;
use tickd::proto::{NewTimeoutRequest, TimerSpec};

/// Register a timer (NewTimeout); prints its id.
#[derive(Debug, Args)]
pub(crate) struct Add {
    /// Fire after this delay.
    #[arg(long, value_parser = duration, conflicts_with = "deadline")]
    delay: Option<Duration>,
    /// Fire at this time: RFC 3339, e.g. 2030-01-02T03:04:05Z or 2030-01-02T04:04:05+01:00.
    #[arg(long, value_parser = rfc3339)]
    deadline: Option<SystemTime>,
    /// Payload given on the command line.
    #[arg(long, conflicts_with = "payload_file")]
    payload: Option<String>,
    /// Read the payload from this file (`-`: standard input).
    #[arg(long, value_name = "FILE")]
    payload_file: Option<PathBuf>,
    /// Client key, unique within the namespace: adding an existing key returns that timer.
    #[arg(long)]
    key: Option<String>,
    /// Re-arm every interval after each firing.
    #[arg(long, value_parser = duration)]
    repeat: Option<Duration>,
    /// Make the timer a lease: heartbeats (touch, keepalive) push its deadline to now + ttl.
    #[arg(long, value_parser = duration)]
    ttl: Option<Duration>,
}

impl Add {
    pub(crate) async fn run(self, session: &Session) -> Result<ExitCode, Failure> {
        // A lease alone (--ttl) is allowed: the server fires it one ttl from now.
        if self.delay.is_none() && self.deadline.is_none() && self.ttl.is_none() {
            return Err(Failure::Usage(
                "add needs --delay, --deadline, or --ttl (a lease that fires after its ttl)".into(),
            ));
        }
        let payload = match (&self.payload, &self.payload_file) {
            (Some(text), _) => text.clone().into_bytes(),
            (None, Some(path)) => read_file_or_stdin(path)?,
            (None, None) => Vec::new(),
        };
        let spec = TimerSpec {
            namespace: session.namespace().to_owned(),
            key: self.key.unwrap_or_default(),
            delay: self.delay.map(to_proto_duration),
            deadline: self.deadline.map(to_proto_timestamp),
            payload: payload.into(),
            repeat: self.repeat.map(to_proto_duration),
            ttl: self.ttl.map(to_proto_duration),
            ..TimerSpec::default()
        };
        let request = session.request(NewTimeoutRequest { timer: Some(spec) });
        let answer = session
            .unary(session.timers_api().new_timeout(request))
            .await?;
        let timer = timer_of_answer(answer.timer)?;
        if session.wants_json() {
            output::print_json_pretty(
                &json!({ "created": answer.created, "timer": output::timer_json(&timer) }),
            );
        } else {
            output::print_line(&timer.id);
            if !answer.created {
                // Adding is idempotent by key: say so, or a script would think it re-armed it.
                eprintln!(
                    "tickctl: key {:?} was already registered; its existing timer is kept",
                    timer.key
                );
            }
        }
        Ok(ExitCode::SUCCESS)
    }
}

/// Reads all of a file, or of standard input for `-`; one that cannot be read is a usage
/// error (exit 2). `add-batch` reads its input with it too, hence the same message.
pub(crate) fn read_file_or_stdin(path: &Path) -> Result<Vec<u8>, Failure> {
    let mut contents = Vec::new();
    let read = if path == Path::new("-") {
        std::io::stdin().lock().read_to_end(&mut contents)
    } else {
        std::fs::File::open(path).and_then(|mut file| file.read_to_end(&mut contents))
    };
    read.map_err(|error| Failure::Usage(format!("reading payload {}: {error}", path.display())))?;
    Ok(contents)
}
