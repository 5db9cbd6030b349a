//! `tickctl add-batch`: registers many timers in one NewTimeouts call from JSON lines, and
//! prints one result per input line (the id, or the error the server gave that item).

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use serde_json::{json, Value};
use tonic::Code;

use super::add::read_file_or_stdin;
use crate::failure::{grpc_code_name, one_line, Failure, EXIT_REFUSED};
use crate::output;
use crate::proto_time::{to_proto_duration, to_proto_timestamp};
use crate::session::Session;
use crate::values::{duration, rfc3339};
use tickd::proto::new_timeout_result::Result as ItemResult;
use tickd::proto::{NewTimeoutsRequest, TimerSpec};

/// Register many timers in one call (NewTimeouts) from JSON lines; prints one result per line.
#[derive(Debug, Args)]
#[command(
    after_help = "Each non-empty input line is one JSON object with any of the fields\n\
  namespace, key, delay, deadline, payload, repeat, ttl, cron, time_zone (strings: durations\n\
  and deadline as `add` takes them) and replace (true or false), e.g.\n\
  {\"key\": \"order-42\", \"delay\": \"30m\", \"payload\": \"close order 42\"}.\n\
  A missing namespace means --namespace."
)]
pub(crate) struct AddBatch {
    /// File of JSON lines (`-`: standard input).
    #[arg(default_value = "-")]
    file: PathBuf,
}

impl AddBatch {
    pub(crate) async fn run(self, session: &Session) -> Result<ExitCode, Failure> {
        let input = read_file_or_stdin(&self.file)?;
        let input = String::from_utf8(input)
            .map_err(|_| Failure::Usage(format!("{} is not UTF-8", self.file.display())))?;
        // Results come back in request order; each is reported under its input line number.
        let mut line_numbers = Vec::new();
        let mut specs = Vec::new();
        for (index, text) in input.lines().enumerate() {
            if text.trim().is_empty() {
                continue;
            }
            specs.push(timer_spec_of_line(session.namespace(), index + 1, text)?);
            line_numbers.push(index + 1);
        }
        if specs.is_empty() {
            return Err(Failure::Usage("add-batch: no timers in the input".into()));
        }
        let request = session.request(NewTimeoutsRequest { timers: specs });
        let answer = session
            .unary(session.timers_api().new_timeouts(request))
            .await?;
        let mut refused = 0;
        for (line, result) in line_numbers.iter().zip(&answer.results) {
            match &result.result {
                Some(ItemResult::Registered(registered)) => {
                    let timer = registered.timer.clone().unwrap_or_default();
                    if session.wants_json() {
                        output::print_json_line(&json!({
                            "line": line,
                            "created": registered.created,
                            "replaced": registered.replaced,
                            "timer": output::timer_json(&timer),
                        }));
                    } else {
                        output::print_line(&timer.id);
                    }
                }
                Some(ItemResult::Error(error)) => {
                    refused += 1;
                    let code = grpc_code_name(Code::from_i32(error.code));
                    if session.wants_json() {
                        output::print_json_line(&json!({
                            "line": line,
                            "error": { "code": code, "message": error.message },
                        }));
                    } else {
                        output::print_line(format!(
                            "error line={line} {code}: {}",
                            one_line(&error.message)
                        ));
                    }
                }
                None => {
                    return Err(Failure::Other(format!(
                        "line {line}: the server gave no result"
                    )))
                }
            }
        }
        if refused > 0 {
            eprintln!(
                "tickctl: {refused} of {} timers were refused",
                line_numbers.len()
            );
            return Ok(ExitCode::from(EXIT_REFUSED));
        }
        Ok(ExitCode::SUCCESS)
    }
}

/// One JSON line as a TimerSpec. Every field but `replace` (a boolean) is a string, parsed
/// like the `add` flags of the same name; a line without `namespace` takes `--namespace`.
fn timer_spec_of_line(
    default_namespace: &str,
    line_number: usize,
    text: &str,
) -> Result<TimerSpec, Failure> {
    let bad_line = |why: String| Failure::Usage(format!("line {line_number}: {why}"));
    let value: Value = serde_json::from_str(text).map_err(|error| bad_line(error.to_string()))?;
    let object = value
        .as_object()
        .ok_or_else(|| bad_line("expected a JSON object".into()))?;
    let mut spec = TimerSpec {
        namespace: default_namespace.to_owned(),
        ..Default::default()
    };
    let parse_duration = |text: &str| duration(text).map(to_proto_duration).map_err(bad_line);
    for (field, value) in object {
        if field == "replace" {
            spec.replace = value
                .as_bool()
                .ok_or_else(|| bad_line("replace: expected true or false".into()))?;
            continue;
        }
        let text = value
            .as_str()
            .ok_or_else(|| bad_line(format!("{field}: expected a string")))?;
        match field.as_str() {
            "namespace" => spec.namespace = text.to_owned(),
            "key" => spec.key = text.to_owned(),
            "payload" => spec.payload = text.as_bytes().to_vec().into(),
            "delay" => spec.delay = Some(parse_duration(text)?),
            "repeat" => spec.repeat = Some(parse_duration(text)?),
            "ttl" => spec.ttl = Some(parse_duration(text)?),
            "cron" => spec.cron = text.to_owned(),
            "time_zone" => spec.time_zone = text.to_owned(),
            "deadline" => {
                spec.deadline = Some(to_proto_timestamp(rfc3339(text).map_err(bad_line)?))
            }
            other => return Err(bad_line(format!("unknown field {other:?}"))),
        }
    }
    Ok(spec)
}
