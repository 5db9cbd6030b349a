//! `tickd-bench keepalive`: registers L leases (ttl 60 s, each with a key, by NewTimeouts
//! batches), opens S KeepAlive streams over the connections, and has each stream heartbeat its
//! share of the leases round-robin with up to `--window` heartbeats in flight (default 64), for a 1 s
//! warm-up and then T seconds. Each heartbeat's round trip is measured.
//! Prints `keepalive leases=.. streams=.. heartbeats_per_s=.. p50_ms=.. p99_ms=.. errors=..`.
//!
//! `etcd-keepalive` (etcd.rs) runs the same driver against etcd's LeaseKeepAlive.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tickd::proto::timer_ref::Target;
use tickd::proto::timers_client::TimersClient;
use tickd::proto::{new_timeout_result, KeepAliveRequest, NewTimeoutsRequest, TimerRef, TimerSpec};
use tonic::transport::Channel;

use crate::client::{
    duration, fresh_namespace, ms, windowed_stream, windowed_streams, ClientArgs, WARMUP,
};

#[derive(Debug, clap::Args)]
pub(crate) struct KeepAliveArgs {
    #[command(flatten)]
    pub client: ClientArgs,
    /// Leases registered and kept alive.
    #[arg(long, default_value_t = 10_000)]
    pub leases: usize,
    /// KeepAlive streams.
    #[arg(long, default_value_t = 64)]
    pub streams: usize,
    /// Measured seconds (after a 1 s warm-up).
    #[arg(long, default_value_t = 10)]
    pub secs: u64,
    /// Heartbeats in flight per stream. 64 × 64 streams saturates tickd here while staying
    /// well under its worker queue (beyond it heartbeats are shed with RESOURCE_EXHAUSTED);
    /// etcd's rate is the same at 8 or 512.
    #[arg(long, default_value_t = 64)]
    pub window: usize,
}

/// The lease ttl: far beyond the run, so no lease expires while it is measured.
pub(crate) const LEASE_TTL: Duration = Duration::from_secs(60);
const REGISTER_BATCH: usize = 1_000;

pub(crate) fn run(args: KeepAliveArgs) {
    let KeepAliveArgs {
        client,
        leases,
        streams,
        secs,
        window,
    } = args;
    client.run(|channels| async move {
        let namespace = fresh_namespace("bench-keepalive");
        let ids = register_leases(&channels, &namespace, leases.max(1)).await?;
        let streams = streams.max(1).min(ids.len());
        let measure = Duration::from_secs(secs);
        let begin = Instant::now() + WARMUP;
        let end = begin + measure;
        let namespace: Arc<str> = namespace.into();
        let tasks = (0..streams)
            .map(|stream| {
                // This stream's share: every `streams`-th lease.
                let mine: Vec<String> = ids.iter().skip(stream).step_by(streams).cloned().collect();
                let namespace = namespace.clone();
                let mut client = TimersClient::new(channels[stream % channels.len()].clone());
                tokio::spawn(windowed_stream(
                    window,
                    begin,
                    end,
                    move |sequence| KeepAliveRequest {
                        timer: Some(TimerRef {
                            namespace: namespace.to_string(),
                            target: Some(Target::Id(
                                mine[(sequence % mine.len() as u64) as usize].clone(),
                            )),
                        }),
                        ttl: None,
                        sequence,
                    },
                    move |requests| async move { client.keep_alive(requests).await },
                    |answer: &tickd::proto::KeepAliveResponse, sequence| {
                        if let Some(error) = &answer.error {
                            return Err(format!("heartbeat failed: {}", error.message));
                        }
                        if answer.sequence != sequence {
                            return Err(format!(
                                "answer out of order: sequence {} where {sequence} was due",
                                answer.sequence
                            ));
                        }
                        Ok(())
                    },
                ))
            })
            .collect();
        let outcome = windowed_streams(tasks, measure).await;
        Ok(format!(
            "keepalive leases={} streams={streams} window={window} heartbeats_per_s={:.0} p50_ms={} p99_ms={} errors={}",
            ids.len(),
            outcome.per_sec(),
            ms(outcome.quantile_ms(0.50)),
            ms(outcome.quantile_ms(0.99)),
            outcome.errors
        ))
    });
}

/// Registers `count` leases with keys `lease-N`, a batch per connection at a time; returns
/// their ids.
async fn register_leases(
    channels: &[Channel],
    namespace: &str,
    count: usize,
) -> Result<Vec<String>, String> {
    let mut ids = Vec::with_capacity(count);
    let batches: Vec<Vec<TimerSpec>> = (0..count)
        .map(|index| TimerSpec {
            namespace: namespace.to_string(),
            key: format!("lease-{index}"),
            ttl: Some(duration(LEASE_TTL)),
            ..TimerSpec::default()
        })
        .collect::<Vec<_>>()
        .chunks(REGISTER_BATCH)
        .map(<[TimerSpec]>::to_vec)
        .collect();
    for group in batches.chunks(channels.len()) {
        let calls: Vec<_> = group
            .iter()
            .zip(channels)
            .map(|(batch, channel)| {
                let mut client = TimersClient::new(channel.clone());
                let request = NewTimeoutsRequest {
                    timers: batch.clone(),
                };
                tokio::spawn(async move { client.new_timeouts(request).await })
            })
            .collect();
        for call in calls {
            let response = call
                .await
                .expect("register task")
                .map_err(|status| format!("registering leases: {status}"))?
                .into_inner();
            for result in response.results {
                match result.result {
                    Some(new_timeout_result::Result::Registered(registered)) => {
                        ids.push(registered.timer.map(|timer| timer.id).unwrap_or_default())
                    }
                    Some(new_timeout_result::Result::Error(error)) => {
                        return Err(format!("registering a lease: {}", error.message))
                    }
                    None => return Err("registering a lease: empty result".to_string()),
                }
            }
        }
    }
    Ok(ids)
}
