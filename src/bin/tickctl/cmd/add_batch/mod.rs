//! `tickctl add-batch`: registers the timers of a file (JSON lines, or what `get` and
//! `pending` print with `-o json`) with NewTimeouts calls of at most `--max-batch` timers
//! each, and prints one result per timer: its input line and the id, or the error the server
//! gave that timer.

mod input;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use tonic::Code;

use super::add::read_file_or_stdin;
use crate::failure::{grpc_code_name, one_line, Failure, EXIT_REFUSED};
use crate::output;
use crate::proto_json::to_json_text;
use crate::session::Session;
use input::{read_batch, BatchItem};
use tickd::proto::new_timeout_result::Result as ItemResult;
use tickd::proto::{NewTimeoutResult, NewTimeoutsRequest};

/// Register the timers of a file of JSON in NewTimeouts calls; prints one result per timer.
#[derive(Debug, Args)]
#[command(
    after_help = "The input is JSON objects one after another (one per line, or pretty):\n\
  timers in proto3 JSON as `tickctl get -o json` prints them (id, remaining and firedCount\n\
  are ignored), listings with \"timers\" as `tickctl pending -o json` prints them, or\n\
  TimerSpecs: namespace, key, delay, deadline, payload (base64), repeat, ttl, cron, timeZone,\n\
  replace. Durations as proto3 JSON (\"1.500s\") or as `add` takes them (\"30m\"); for a\n\
  payload written by hand, payloadText takes it as text. A timer without a namespace goes\n\
  to --namespace. For example:\n  \
  {\"key\": \"order-42\", \"delay\": \"30m\", \"payloadText\": \"close order 42\"}\n\
  Nothing is sent unless every timer reads well. Results are printed per timer, as\n\
  `line=N id=ID` or `line=N error CODE: message`; exit 1 if any was refused."
)]
pub(crate) struct AddBatch {
    /// File of JSON (`-`: standard input).
    #[arg(default_value = "-")]
    file: PathBuf,
    /// Timers per NewTimeouts call: at most tickd's own --max-batch.
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u32).range(1..))]
    max_batch: u32,
}

impl AddBatch {
    pub(crate) async fn run(self, session: &Session) -> Result<ExitCode, Failure> {
        let input = read_file_or_stdin(&self.file)?;
        let input = String::from_utf8(input)
            .map_err(|_| Failure::Usage(format!("{} is not UTF-8", self.file.display())))?;
        let items = read_batch(&input, session.namespace())?;
        if items.is_empty() {
            return Err(Failure::Usage("add-batch: no timers in the input".into()));
        }
        let mut refused = 0;
        let mut sent = 0;
        for chunk in items.chunks(self.max_batch as usize) {
            let results = register(session, chunk)
                .await
                .map_err(|failure| failure.after(&chunk_not_registered(&items, sent, chunk)))?;
            sent += chunk.len();
            for (item, result) in chunk.iter().zip(results) {
                if !report(session, item.line, result)? {
                    refused += 1;
                }
            }
        }
        if refused > 0 {
            eprintln!("tickctl: {refused} of {} timers were refused", items.len());
            return Ok(ExitCode::from(EXIT_REFUSED));
        }
        Ok(ExitCode::SUCCESS)
    }
}

/// One NewTimeouts call for `chunk`; its results, one per timer in order.
async fn register(
    session: &Session,
    chunk: &[BatchItem],
) -> Result<Vec<NewTimeoutResult>, Failure> {
    let timers = chunk.iter().map(|item| item.spec.clone()).collect();
    let request = session.request(NewTimeoutsRequest { timers });
    let answer = session
        .unary(session.timers_api().new_timeouts(request))
        .await?;
    if answer.results.len() != chunk.len() {
        return Err(Failure::Other(format!(
            "the server answered {} results for {} timers",
            answer.results.len(),
            chunk.len()
        )));
    }
    Ok(answer.results)
}

/// Says which timers a failed call leaves unregistered: those of the call, and the rest,
/// never sent. The ones before were registered, and their results printed.
fn chunk_not_registered(items: &[BatchItem], sent: usize, chunk: &[BatchItem]) -> String {
    let first_line = chunk.first().map_or(0, |item| item.line);
    let last_line = chunk.last().map_or(0, |item| item.line);
    let not_sent = items.len() - sent - chunk.len();
    format!(
        "timers {} to {} of {} (lines {first_line} to {last_line}) not registered, \
         {not_sent} after them not sent",
        sent + 1,
        sent + chunk.len(),
        items.len()
    )
}

/// Prints one timer's result; false when the server refused it.
fn report(session: &Session, line: usize, result: NewTimeoutResult) -> Result<bool, Failure> {
    let registered = matches!(result.result, Some(ItemResult::Registered(_)));
    if session.wants_json() {
        // The NewTimeoutResult in proto3 JSON, on one line, with the line number first.
        let result = to_json_text(&result, false);
        let fields = result
            .strip_prefix('{')
            .and_then(|rest| rest.strip_suffix('}'))
            .unwrap_or_default();
        let separator = if fields.is_empty() { "" } else { "," };
        output::print_line(format!("{{\"line\":{line}{separator}{fields}}}"));
        return Ok(registered);
    }
    match result.result {
        Some(ItemResult::Registered(answer)) => {
            let id = answer.timer.map(|timer| timer.id).unwrap_or_default();
            let mut text = format!("line={line} id={id}");
            if answer.replaced {
                text.push_str(" replaced");
            } else if !answer.created {
                text.push_str(" existing");
            }
            output::print_line(text);
        }
        Some(ItemResult::Error(error)) => output::print_line(format!(
            "line={line} error {}: {}",
            grpc_code_name(Code::from_i32(error.code)),
            one_line(&error.message)
        )),
        None => {
            return Err(Failure::Other(format!(
                "line {line}: the server gave no result"
            )))
        }
    }
    Ok(registered)
}
