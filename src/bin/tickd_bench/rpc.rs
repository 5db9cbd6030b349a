//! `tickd-bench rpc`: C concurrent callers in a closed loop for T seconds (after a 1 s
//! warm-up), spread over several HTTP/2 connections:
//! - `unary`: NewTimeout, one timer per call;
//! - `batch`: NewTimeouts, `--batch` timers per call (timers_per_s counts timers);
//! - `health`: grpc.health.v1 Check, the empty-RPC ceiling (timers_per_s counts calls).
//!
//! Timers are one hour away, so nothing fires during the run. Latencies are per call.
//! Prints `rpc mode=.. conc=.. timers_per_s=.. p50_ms=.. p99_ms=.. errors=..`.

use std::time::Duration;

use bytes::Bytes;
use tickd::proto::timers_client::TimersClient;
use tickd::proto::{NewTimeoutRequest, NewTimeoutsRequest, TimerSpec};
use tonic::transport::Channel;
use tonic::Status;
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::HealthCheckRequest;

use crate::client::{closed_loop, duration, fresh_namespace, ms, registration, Caller, ClientArgs};

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub(crate) enum Mode {
    Unary,
    Batch,
    Health,
}

#[derive(Debug, clap::Args)]
pub(crate) struct RpcArgs {
    #[command(flatten)]
    client: ClientArgs,
    #[arg(long, value_enum, default_value_t = Mode::Unary)]
    mode: Mode,
    /// Concurrent callers.
    #[arg(long, default_value_t = 64)]
    conc: usize,
    /// Measured seconds (after a 1 s warm-up).
    #[arg(long, default_value_t = 10)]
    secs: u64,
    /// Timers per NewTimeouts call (`--mode batch`).
    #[arg(long, default_value_t = 100)]
    batch: usize,
    /// Payload bytes of each timer.
    #[arg(long, default_value_t = 16)]
    payload_bytes: usize,
}

enum RpcCaller {
    Unary {
        client: TimersClient<Channel>,
        // Boxed: a spec is several hundred bytes, the batch variant a few dozen.
        spec: Box<TimerSpec>,
    },
    Batch {
        client: TimersClient<Channel>,
        specs: Vec<TimerSpec>,
    },
    Health {
        client: HealthClient<Channel>,
    },
}

impl Caller for RpcCaller {
    async fn call(&mut self) -> Result<u64, Status> {
        match self {
            RpcCaller::Unary { client, spec } => {
                let request = registration(NewTimeoutRequest {
                    timer: Some(spec.as_ref().clone()),
                });
                client.new_timeout(request).await?;
                Ok(1)
            }
            RpcCaller::Batch { client, specs } => {
                let request = registration(NewTimeoutsRequest {
                    timers: specs.clone(),
                });
                let response = client.new_timeouts(request).await?.into_inner();
                let registered = response
                    .results
                    .iter()
                    .filter(|result| {
                        matches!(
                            result.result,
                            Some(tickd::proto::new_timeout_result::Result::Registered(_))
                        )
                    })
                    .count();
                if registered < specs.len() {
                    return Err(Status::internal(format!(
                        "{} of {} batch items failed: {:?}",
                        specs.len() - registered,
                        specs.len(),
                        response
                            .results
                            .iter()
                            .find_map(|result| match &result.result {
                                Some(tickd::proto::new_timeout_result::Result::Error(error)) =>
                                    Some(error.message.clone()),
                                _ => None,
                            })
                    )));
                }
                Ok(registered as u64)
            }
            RpcCaller::Health { client } => {
                client.check(HealthCheckRequest::default()).await?;
                Ok(1)
            }
        }
    }
}

pub(crate) fn run(args: RpcArgs) {
    let RpcArgs {
        client,
        mode,
        conc,
        secs,
        batch,
        payload_bytes,
    } = args;
    client.run(|channels| async move {
        let spec = TimerSpec {
            namespace: fresh_namespace("bench-rpc"),
            delay: Some(duration(Duration::from_secs(3600))),
            payload: Bytes::from(vec![0x5a; payload_bytes]),
            ..TimerSpec::default()
        };
        let callers = (0..conc.max(1))
            .map(|index| {
                let channel = channels[index % channels.len()].clone();
                match mode {
                    Mode::Unary => RpcCaller::Unary {
                        client: TimersClient::new(channel),
                        spec: Box::new(spec.clone()),
                    },
                    Mode::Batch => RpcCaller::Batch {
                        client: TimersClient::new(channel),
                        specs: vec![spec.clone(); batch.max(1)],
                    },
                    Mode::Health => RpcCaller::Health {
                        client: HealthClient::new(channel),
                    },
                }
            })
            .collect();
        let outcome = closed_loop(callers, Duration::from_secs(secs)).await;
        let mode = match mode {
            Mode::Unary => "unary",
            Mode::Batch => "batch",
            Mode::Health => "health",
        };
        Ok(format!(
            "rpc mode={mode} conc={conc} timers_per_s={:.0} p50_ms={} p99_ms={} errors={}",
            outcome.per_sec(),
            ms(outcome.quantile_ms(0.50)),
            ms(outcome.quantile_ms(0.99)),
            outcome.errors
        ))
    });
}
