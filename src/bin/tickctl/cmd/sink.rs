//! `tickctl sink`: a namespace's push sink, set, shown, paused, resumed and removed while
//! tickd runs
//! (the `tickd.v1.Sinks` service), and how the sinks are doing. URLs come back with their
//! credentials masked (`***@`), as tickd answers them.
//!
//! ```text
//! tickctl sink set orders 'http://user:secret@10.0.0.7:8080/timers'
//! tickctl sink set orders 'http://user:secret@10.0.0.7:8080/timers' --rate 50/s
//! tickctl sink list
//! tickctl sink get orders
//! tickctl sink pause orders      # no push leaves; expirations wait in the buffer
//! tickctl sink resume orders
//! tickctl sink status            # every sink the token allows, as a table
//! tickctl sink remove orders
//! ```

use std::process::ExitCode;

use clap::{Args, Subcommand};

use crate::failure::Failure;
use crate::output;
use crate::session::Session;
use tickd::proto::{
    GetSinkRequest, ListSinksRequest, PauseSinkRequest, RemoveSinkRequest, ResumeSinkRequest,
    SetSinkRequest, SinkCircuit, SinkOrigin, SinkState, SinkStatusRequest, SinkView as SinkMessage,
};

/// Set, show, pause, resume or remove a namespace's push sink, or show how the sinks are
/// doing.
#[derive(Debug, Args)]
pub(crate) struct Sink {
    #[command(subcommand)]
    action: Action,
}

#[derive(Debug, Subcommand)]
enum Action {
    /// Set a namespace's sink (or give it a new URL); kept across restarts.
    Set {
        /// The namespace whose expirations go to the sink.
        #[arg(value_name = "NAMESPACE")]
        of: String,
        /// Where they go, as --sink takes it: http://[user:password@]host[:port]/path[#json|#protobuf][,h2c].
        url: String,
        /// The most pushes a second: 50/s, or 50/s,burst=10 (none: no limit). Set again
        /// with the same URL, only the rate changes.
        #[arg(long)]
        rate: Option<String>,
        /// A file of secrets to sign every push with (Standard Webhooks, `whsec_<base64>`
        /// one per line; two sign with both). Sent once, kept with the sink, never shown.
        /// Without it, the secrets given before stay.
        #[arg(long, value_name = "PATH")]
        secret_file: Option<std::path::PathBuf>,
        /// Forget the secrets given before: the sink signs as --sink-secret-file says, or
        /// not at all.
        #[arg(long, conflicts_with = "secret_file")]
        clear_secrets: bool,
    },
    /// Show a namespace's sink, its credentials masked.
    Get {
        /// The sink's namespace.
        #[arg(value_name = "NAMESPACE")]
        of: String,
    },
    /// Pause a namespace's sink (one given by --sink too), across restarts: no push leaves
    /// and no attempt is spent; its expirations wait in the namespace's buffer. Answered
    /// once the pushes under way have ended.
    Pause {
        /// The sink's namespace.
        #[arg(value_name = "NAMESPACE")]
        of: String,
    },
    /// Resume a paused sink: what waited is pushed.
    Resume {
        /// The sink's namespace.
        #[arg(value_name = "NAMESPACE")]
        of: String,
    },
    /// List every sink the token allows: --sink's and those set through the API (on any
    /// replica), one line each.
    List,
    /// Remove a namespace's sink: its expirations then wait for subscribers.
    Remove {
        /// The sink's namespace.
        #[arg(value_name = "NAMESPACE")]
        of: String,
    },
    /// How each sink is doing: its circuit, pushes in flight, pushes by outcome, the last
    /// error.
    Status {
        /// The sink's namespace (none: every sink the token allows).
        #[arg(value_name = "NAMESPACE")]
        of: Option<String>,
    },
}

// The namespace is an argument of each action, not `--namespace`: that global flag's id
// is `namespace`, so each action's field has its own (`of`), shown as NAMESPACE.
impl Sink {
    pub(crate) async fn run(self, session: &Session) -> Result<ExitCode, Failure> {
        let api = session.sinks_api();
        match self.action {
            Action::Set {
                of: namespace,
                url,
                rate,
                secret_file,
                clear_secrets,
            } => {
                let secrets = match secret_file {
                    Some(path) => read_secrets(&path)?,
                    None => Vec::new(),
                };
                let request = session.request(SetSinkRequest {
                    namespace,
                    url,
                    rate: rate.unwrap_or_default(),
                    secrets,
                    clear_secrets,
                });
                let answer = session.unary(api.clone().set_sink(request)).await?;
                if session.wants_json() {
                    output::print_message(&answer);
                } else {
                    let sink = sink_of(answer.sink)?;
                    let what = if answer.changed { "set" } else { "unchanged" };
                    output::print_line(format!("{what} {}", sink_line(&sink)));
                }
            }
            Action::Get { of: namespace } => {
                let request = session.request(GetSinkRequest { namespace });
                let answer = session.unary(api.clone().get_sink(request)).await?;
                if session.wants_json() {
                    output::print_message(&answer);
                } else {
                    output::print_line(sink_line(&sink_of(answer.sink)?));
                }
            }
            Action::Pause { of: namespace } => {
                let request = session.request(PauseSinkRequest { namespace });
                let answer = session.unary(api.clone().pause_sink(request)).await?;
                if session.wants_json() {
                    output::print_message(&answer);
                } else {
                    let what = if answer.changed {
                        "paused"
                    } else {
                        "paused already"
                    };
                    output::print_line(format!("{what} {}", sink_line(&sink_of(answer.sink)?)));
                }
            }
            Action::Resume { of: namespace } => {
                let request = session.request(ResumeSinkRequest { namespace });
                let answer = session.unary(api.clone().resume_sink(request)).await?;
                if session.wants_json() {
                    output::print_message(&answer);
                } else {
                    let what = if answer.changed {
                        "resumed"
                    } else {
                        "not paused"
                    };
                    output::print_line(format!("{what} {}", sink_line(&sink_of(answer.sink)?)));
                }
            }
            Action::List => {
                let request = session.request(ListSinksRequest {});
                let answer = session.unary(api.clone().list_sinks(request)).await?;
                if session.wants_json() {
                    output::print_message(&answer);
                } else {
                    for sink in &answer.sinks {
                        output::print_line(sink_line(sink));
                    }
                }
            }
            Action::Remove { of: namespace } => {
                let request = session.request(RemoveSinkRequest {
                    namespace: namespace.clone(),
                });
                let answer = session.unary(api.clone().remove_sink(request)).await?;
                if session.wants_json() {
                    output::print_message(&answer);
                } else {
                    output::print_line(format!("removed the sink of {}", shown(&namespace)));
                }
            }
            Action::Status { of: namespace } => {
                let request = session.request(SinkStatusRequest {
                    all: namespace.is_none(),
                    namespace: namespace.unwrap_or_default(),
                });
                let answer = session.unary(api.clone().sink_status(request)).await?;
                if session.wants_json() {
                    output::print_message(&answer);
                } else {
                    let rows: Vec<Vec<String>> = answer.sinks.iter().map(status_row).collect();
                    output::print_line(output::table(
                        &[
                            "NAMESPACE",
                            "URL",
                            "FROM",
                            "PAUSED",
                            "RATE",
                            "SLOWED TO",
                            "CIRCUIT",
                            "WAITING",
                            "IN FLIGHT",
                            "DELIVERED",
                            "RETRY",
                            "SLOWED",
                            "REJECTED",
                            "UNREACHABLE",
                            "LAST ERROR",
                        ],
                        &rows,
                    ));
                }
            }
        }
        Ok(ExitCode::SUCCESS)
    }
}

/// The secrets of `--secret-file`: its lines that are not blank. What a line holds is
/// never echoed; tickd checks each.
fn read_secrets(path: &std::path::Path) -> Result<Vec<String>, Failure> {
    let text = std::fs::read_to_string(path)
        .map_err(|error| Failure::Other(format!("--secret-file {}: {error}", path.display())))?;
    Ok(text
        .lines()
        .map(str::trim)
        .filter(|line| !line.is_empty())
        .map(str::to_owned)
        .collect())
}

/// The sink a successful answer must carry: without one the server broke the API.
fn sink_of(sink: Option<SinkMessage>) -> Result<SinkMessage, Failure> {
    sink.ok_or_else(|| Failure::Other("the server answered without a sink".into()))
}

fn shown(namespace: &str) -> &str {
    if namespace.is_empty() {
        "(default)"
    } else {
        namespace
    }
}

fn origin(sink: &SinkMessage) -> &'static str {
    match SinkOrigin::try_from(sink.origin) {
        Ok(SinkOrigin::Flag) => "--sink",
        Ok(SinkOrigin::Api) => "api",
        _ => "-",
    }
}

/// `namespace=orders url=http://***@10.0.0.7:8080/timers from=api paused=false`, and
/// ` rate=50/s,burst=5` when it has one.
fn sink_line(sink: &SinkMessage) -> String {
    let rate = if sink.rate.is_empty() {
        String::new()
    } else {
        format!(" rate={}", sink.rate)
    };
    let signed = if sink.signed { " signed=true" } else { "" };
    format!(
        "namespace={} url={} from={} paused={}{rate}{signed}",
        shown(&sink.namespace),
        sink.url,
        origin(sink),
        sink.paused
    )
}

fn or_dash(text: &str) -> String {
    if text.is_empty() {
        "-".to_owned()
    } else {
        text.to_owned()
    }
}

fn status_row(state: &SinkState) -> Vec<String> {
    let sink = state.sink.clone().unwrap_or_default();
    let circuit = match SinkCircuit::try_from(state.circuit) {
        Ok(SinkCircuit::Closed) => "closed",
        Ok(SinkCircuit::Open) => "open",
        Ok(SinkCircuit::HalfOpen) => "half-open",
        _ => "-",
    };
    vec![
        shown(&sink.namespace).to_owned(),
        sink.url.clone(),
        origin(&sink).to_owned(),
        if sink.paused { "yes" } else { "no" }.to_owned(),
        or_dash(&sink.rate),
        if state.slowed_to > 0.0 {
            format!("{:.1}/s", state.slowed_to)
        } else {
            "-".to_owned()
        },
        circuit.to_owned(),
        state
            .waiting
            .map_or_else(|| "-".to_owned(), |waiting| waiting.to_string()),
        state.in_flight.to_string(),
        state.delivered.to_string(),
        state.retry.to_string(),
        state.slowed.to_string(),
        state.rejected.to_string(),
        state.unreachable.to_string(),
        or_dash(&state.last_error),
    ]
}
