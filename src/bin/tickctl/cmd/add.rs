//! `tickctl add`: registers one timer (NewTimeout), perhaps a cron timer or one replacing
//! the pending timer under its key, and prints its id, or with `--output json` whether it was
//! created or replaced and the timer; and the `--delay`/`--deadline` and payload flags that
//! `reschedule` shares.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, SystemTime};

use clap::Args;

use super::get::timer_of_answer;
use crate::failure::Failure;
use crate::output;
use crate::proto_time::{to_proto_duration, to_proto_timestamp};
use crate::session::Session;
use crate::values::{duration, rfc3339};
use tickd::proto::{NewTimeoutRequest, NewTimeoutResponse, TimerSpec};

/// Register a timer (NewTimeout); prints its id.
#[derive(Debug, Args)]
pub(crate) struct Add {
    #[command(flatten)]
    when: When,
    #[command(flatten)]
    payload: PayloadArgs,
    /// Client key, unique within the namespace: adding an existing key returns that timer.
    #[arg(long)]
    key: Option<String>,
    /// With --key: replace a pending timer under the key (deadline, payload, schedule).
    #[arg(long, requires = "key")]
    replace: bool,
    /// Re-arm every interval after each firing.
    #[arg(long, value_parser = duration, allow_hyphen_values = true, conflicts_with = "cron")]
    repeat: Option<Duration>,
    /// Make the timer a lease: heartbeats (touch, keepalive) push its deadline to now + ttl.
    #[arg(long, value_parser = duration, allow_hyphen_values = true)]
    ttl: Option<Duration>,
    /// Fire on a calendar schedule: 5 fields (minute hour day-of-month month day-of-week),
    /// 6 with seconds first, or @hourly/@daily/@weekly/@monthly/@yearly. With --delay or
    /// --deadline the first firing is the first cron time at or after it.
    #[arg(long, value_name = "EXPRESSION")]
    cron: Option<String>,
    /// The IANA time zone --cron is read in, e.g. Europe/Berlin (default UTC).
    #[arg(long = "tz", value_name = "ZONE", requires = "cron")]
    time_zone: Option<String>,
}

/// When a timer fires next: `add`'s and `reschedule`'s `--delay` and `--deadline`.
#[derive(Debug, Args)]
pub(crate) struct When {
    /// Fire after this delay.
    #[arg(long, value_parser = duration, allow_hyphen_values = true, conflicts_with = "deadline")]
    pub(crate) delay: Option<Duration>,
    /// Fire at this time: RFC 3339, e.g. 2030-01-02T03:04:05Z or 2030-01-02T04:04:05+01:00.
    #[arg(long, visible_alias = "at", value_parser = rfc3339)]
    pub(crate) deadline: Option<SystemTime>,
}

impl When {
    pub(crate) fn is_empty(&self) -> bool {
        self.delay.is_none() && self.deadline.is_none()
    }
}

/// A payload given inline or read from a file: `add`'s and `reschedule`'s `--payload` and
/// `--payload-file`.
#[derive(Debug, Args)]
pub(crate) struct PayloadArgs {
    /// Payload given on the command line.
    #[arg(long, conflicts_with = "payload_file")]
    payload: Option<String>,
    /// Read the payload from this file (`-`: standard input).
    #[arg(long, value_name = "FILE")]
    payload_file: Option<PathBuf>,
}

impl PayloadArgs {
    /// The payload's bytes, None when neither flag was given.
    pub(crate) fn read(&self) -> Result<Option<Vec<u8>>, Failure> {
        match (&self.payload, &self.payload_file) {
            (Some(text), _) => Ok(Some(text.clone().into_bytes())),
            (None, Some(path)) => read_file_or_stdin(path).map(Some),
            (None, None) => Ok(None),
        }
    }
}

impl Add {
    pub(crate) async fn run(self, session: &Session) -> Result<ExitCode, Failure> {
        // A lease alone (--ttl) is allowed: the server fires it one ttl from now; a cron
        // timer alone at its first cron time from now.
        if self.when.is_empty() && self.ttl.is_none() && self.cron.is_none() {
            return Err(Failure::Usage(
                "add needs --delay, --deadline, --ttl (a lease that fires after its ttl) or --cron"
                    .into(),
            ));
        }
        let payload = self.payload.read()?.unwrap_or_default();
        let spec = TimerSpec {
            namespace: session.namespace().to_owned(),
            key: self.key.unwrap_or_default(),
            delay: self.when.delay.map(to_proto_duration),
            deadline: self.when.deadline.map(to_proto_timestamp),
            payload: payload.into(),
            repeat: self.repeat.map(to_proto_duration),
            ttl: self.ttl.map(to_proto_duration),
            cron: self.cron.unwrap_or_default(),
            time_zone: self.time_zone.unwrap_or_default(),
            replace: self.replace,
        };
        let request = session.request(NewTimeoutRequest { timer: Some(spec) });
        let answer = session
            .unary(session.timers_api().new_timeout(request))
            .await?;
        let timer = timer_of_answer(answer.timer)?;
        if session.wants_json() {
            output::print_message(&NewTimeoutResponse {
                timer: Some(timer),
                ..answer
            });
        } else {
            output::print_line(&timer.id);
            if answer.replaced {
                eprintln!(
                    "tickctl: key {:?}: the pending timer was replaced",
                    timer.key
                );
            } else if !answer.created {
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
