//! `tickctl keepalive`: keeps leases alive over one KeepAlive stream, sending a round of
//! heartbeats (one per lease) every interval and printing each answer, until `--count` rounds
//! are answered, Ctrl-C, or a lease is lost (exit with that heartbeat's gRPC code).

use std::io::IsTerminal;
use std::process::ExitCode;
use std::time::Duration;

use clap::Args;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Code, Status};

use crate::failure::Failure;
use crate::output;
use crate::proto_time::{from_proto_duration, to_proto_duration};
use crate::session::Session;
use crate::streaming::interrupted;
use crate::target::timer_ref_in;
use crate::values::{duration, timer_id};
use tickd::proto::{timer_ref, GetRequest, KeepAliveRequest, KeepAliveResponse, TimerRef};

/// Keep leases alive over one KeepAlive stream, heartbeating every ttl/3 until Ctrl-C.
#[derive(Debug, Args)]
pub(crate) struct Keepalive {
    /// Ids of the leases to keep alive.
    #[arg(required_unless_present = "keys", value_parser = timer_id)]
    ids: Vec<String>,
    /// Keys of leases to keep alive (repeatable).
    #[arg(long = "key", value_name = "KEY")]
    keys: Vec<String>,
    /// Ttl sent with every heartbeat (default: each lease's own, read with Get).
    #[arg(long, value_parser = duration, allow_hyphen_values = true)]
    ttl: Option<Duration>,
    /// Time between heartbeats (default: a third of the shortest ttl).
    #[arg(long, value_parser = duration, allow_hyphen_values = true)]
    interval: Option<Duration>,
    /// Stop after this many rounds of heartbeats (default: until Ctrl-C).
    #[arg(long)]
    count: Option<u64>,
}

impl Keepalive {
    pub(crate) async fn run(self, session: &Session) -> Result<ExitCode, Failure> {
        let leases = self.leases(session.namespace());
        let interval = self.heartbeat_interval(session, &leases).await?;

        let (heartbeats, outgoing) = mpsc::channel::<KeepAliveRequest>(leases.len().max(1) * 2);
        let mut timers = session.timers_api();
        // The call's headers arrive only once the stream is open; the first round is sent
        // right away by the loop below, so send nothing before awaiting it.
        let mut answers = session
            .open_stream(
                "KeepAlive",
                timers.keep_alive(ReceiverStream::new(outgoing)),
            )
            .await?;
        if std::io::stderr().is_terminal() {
            eprintln!(
                "tickctl: keeping {} lease(s) alive every {}; Ctrl-C to stop",
                leases.len(),
                humantime::format_duration(Duration::from_millis(interval.as_millis() as u64))
            );
        }
        let mut ticker = tokio::time::interval(interval);
        // After a stall, one late round rather than a burst of them.
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut sequence = 0u64;
        let mut rounds_sent = 0u64;
        let mut answered = 0u64;
        let answers_expected = |rounds: u64| rounds * leases.len() as u64;
        loop {
            let more_rounds = self.count.is_none_or(|count| rounds_sent < count);
            tokio::select! {
                _ = ticker.tick(), if more_rounds => {
                    for lease in &leases {
                        sequence += 1;
                        let heartbeat = KeepAliveRequest {
                            timer: Some(lease.clone()),
                            ttl: self.ttl.map(to_proto_duration),
                            sequence,
                        };
                        if heartbeats.send(heartbeat).await.is_err() {
                            return Err(Failure::Other("the KeepAlive stream closed".into()));
                        }
                    }
                    rounds_sent += 1;
                }
                answer = answers.message() => {
                    let answer = answer?.ok_or_else(|| {
                        Failure::Other("the server closed the KeepAlive stream".into())
                    })?;
                    if let Some(error) = &answer.error {
                        // The lease is lost (or never existed): nothing to keep alive.
                        return Err(Failure::Status(Status::new(
                            Code::from_i32(error.code),
                            format!("heartbeat {}: {}", answer.sequence, error.message),
                        )));
                    }
                    answered += 1;
                    print_kept(session, &answer);
                    if self.count.is_some_and(|count| answered >= answers_expected(count)) {
                        return Ok(ExitCode::SUCCESS);
                    }
                }
                _ = interrupted() => return Ok(ExitCode::SUCCESS),
            }
        }
    }

    /// The leases named by id, then those named by `--key`, in `--namespace`.
    fn leases(&self, namespace: &str) -> Vec<TimerRef> {
        let by_id = self.ids.iter().cloned().map(timer_ref::Target::Id);
        let by_key = self.keys.iter().cloned().map(timer_ref::Target::Key);
        by_id
            .chain(by_key)
            .map(|target| timer_ref_in(namespace, target))
            .collect()
    }

    /// `--interval`, else a third of `--ttl`, else a third of the shortest lease's own ttl: a
    /// lease then survives two lost heartbeats in a row. At least 1 ms, as the ticker needs.
    async fn heartbeat_interval(
        &self,
        session: &Session,
        leases: &[TimerRef],
    ) -> Result<Duration, Failure> {
        let interval = match (self.interval, self.ttl) {
            (Some(interval), _) => interval,
            (None, Some(ttl)) => ttl / 3,
            (None, None) => shortest_lease_ttl(session, leases).await? / 3,
        };
        Ok(interval.max(Duration::from_millis(1)))
    }
}

/// The shortest ttl of the leases, each read with Get; a timer without a ttl is not a lease
/// and cannot set the pace (usage error: give --ttl).
async fn shortest_lease_ttl(session: &Session, leases: &[TimerRef]) -> Result<Duration, Failure> {
    let mut timers = session.timers_api();
    let mut shortest: Option<Duration> = None;
    for lease in leases {
        let request = session.request(GetRequest {
            timer: Some(lease.clone()),
        });
        let timer = session
            .unary(timers.get(request))
            .await?
            .timer
            .unwrap_or_default();
        let ttl = from_proto_duration(timer.ttl.as_ref())
            .filter(|ttl| !ttl.is_zero())
            .ok_or_else(|| {
                Failure::Usage(format!(
                    "timer {} has no ttl (it is not a lease); give --ttl",
                    timer.id
                ))
            })?;
        shortest = Some(shortest.map_or(ttl, |current| current.min(ttl)));
    }
    Ok(shortest.unwrap_or(Duration::from_secs(1)))
}

/// One answered heartbeat: a `kept ...` line, or one compact JSON object per line.
fn print_kept(session: &Session, answer: &KeepAliveResponse) {
    if session.wants_json() {
        output::print_message_line(answer);
    } else {
        let deadline = output::timestamp_text(answer.deadline.as_ref());
        output::print_line(format!(
            "kept id={} deadline={} sequence={}",
            answer.id, deadline, answer.sequence
        ));
    }
}
