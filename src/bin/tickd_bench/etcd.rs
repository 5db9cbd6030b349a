//! etcd side by side: the same drivers as `rpc` and `keepalive`, against etcd's lease API
//! (`proto/peers/etcd_lease.proto`, a minimal client-only subset of `etcdserverpb`).
//! - `etcd-grant`: C callers in a closed loop of LeaseGrant (ttl 60 s), compared with
//!   `rpc --mode unary` (NewTimeout). Prints `etcd_grant conc=.. grants_per_s=.. p50_ms=.. p99_ms=.. errors=..`.
//! - `etcd-keepalive`: grants L leases, then S LeaseKeepAlive streams heartbeat them
//!   round-robin with a window in flight, compared with `keepalive`. Prints
//!   `etcd_keepalive leases=.. streams=.. heartbeats_per_s=.. p50_ms=.. p99_ms=.. errors=..`.

use std::time::{Duration, Instant};

use tonic::transport::Channel;
use tonic::Status;

use crate::client::{
    closed_loop, ms, windowed_stream, windowed_streams, Caller, ClientArgs, WARMUP,
};
use crate::keepalive::KeepAliveArgs;
use crate::keepalive::LEASE_TTL;

mod pb {
    // Generated code: its items are `pub` by construction.
    #![allow(clippy::all, missing_docs, unreachable_pub)]
    tonic::include_proto!("etcdserverpb");
}

use pb::lease_client::LeaseClient;
use pb::{LeaseGrantRequest, LeaseKeepAliveRequest, LeaseKeepAliveResponse};

#[derive(Debug, clap::Args)]
pub(crate) struct EtcdGrantArgs {
    #[command(flatten)]
    client: ClientArgs,
    /// Concurrent callers.
    #[arg(long, default_value_t = 64)]
    conc: usize,
    /// Measured seconds (after a 1 s warm-up).
    #[arg(long, default_value_t = 10)]
    secs: u64,
}

struct Granter {
    client: LeaseClient<Channel>,
}

impl Caller for Granter {
    async fn call(&mut self) -> Result<u64, Status> {
        grant(&mut self.client).await?;
        Ok(1)
    }
}

async fn grant(client: &mut LeaseClient<Channel>) -> Result<i64, Status> {
    let response = client
        .lease_grant(LeaseGrantRequest {
            ttl: LEASE_TTL.as_secs() as i64,
            id: 0,
        })
        .await?
        .into_inner();
    if !response.error.is_empty() {
        return Err(Status::internal(format!("LeaseGrant: {}", response.error)));
    }
    Ok(response.id)
}

pub(crate) fn run_grant(args: EtcdGrantArgs) {
    let EtcdGrantArgs { client, conc, secs } = args;
    client.run(|channels| async move {
        let callers = (0..conc.max(1))
            .map(|index| Granter {
                client: LeaseClient::new(channels[index % channels.len()].clone()),
            })
            .collect();
        let outcome = closed_loop(callers, Duration::from_secs(secs)).await;
        Ok(format!(
            "etcd_grant conc={conc} grants_per_s={:.0} p50_ms={} p99_ms={} errors={}",
            outcome.per_sec(),
            ms(outcome.quantile_ms(0.50)),
            ms(outcome.quantile_ms(0.99)),
            outcome.errors
        ))
    });
}

/// Driven exactly like `tickd-bench keepalive`, with the same flags.
pub(crate) fn run_keepalive(args: KeepAliveArgs) {
    let KeepAliveArgs {
        client,
        leases,
        streams,
        secs,
        window,
    } = args;
    client.run(|channels| async move {
        let ids = grant_leases(&channels, leases.max(1)).await?;
        let streams = streams.max(1).min(ids.len());
        let measure = Duration::from_secs(secs);
        let begin = Instant::now() + WARMUP;
        let end = begin + measure;
        let tasks = (0..streams)
            .map(|stream| {
                let mine: Vec<i64> = ids.iter().skip(stream).step_by(streams).copied().collect();
                let mut client = LeaseClient::new(channels[stream % channels.len()].clone());
                tokio::spawn(windowed_stream(
                    window,
                    begin,
                    end,
                    move |sequence| LeaseKeepAliveRequest {
                        id: mine[(sequence % mine.len() as u64) as usize],
                    },
                    move |requests| async move { client.lease_keep_alive(requests).await },
                    |answer: &LeaseKeepAliveResponse, _sequence| {
                        if answer.ttl <= 0 {
                            return Err(format!("lease {:x} not found or expired", answer.id));
                        }
                        Ok(())
                    },
                ))
            })
            .collect();
        let outcome = windowed_streams(tasks, measure).await;
        Ok(format!(
            "etcd_keepalive leases={} streams={streams} window={window} heartbeats_per_s={:.0} p50_ms={} p99_ms={} errors={}",
            ids.len(),
            outcome.per_sec(),
            ms(outcome.quantile_ms(0.50)),
            ms(outcome.quantile_ms(0.99)),
            outcome.errors
        ))
    });
}

/// Grants `count` leases, 64 calls at a time spread over the connections.
async fn grant_leases(channels: &[Channel], count: usize) -> Result<Vec<i64>, String> {
    const CONCURRENT: usize = 64;
    let tasks: Vec<_> = (0..CONCURRENT.min(count))
        .map(|caller| {
            let mut client = LeaseClient::new(channels[caller % channels.len()].clone());
            let share =
                count / CONCURRENT.min(count) + usize::from(caller < count % CONCURRENT.min(count));
            tokio::spawn(async move {
                let mut ids = Vec::with_capacity(share);
                for _ in 0..share {
                    ids.push(grant(&mut client).await?);
                }
                Ok::<_, Status>(ids)
            })
        })
        .collect();
    let mut ids = Vec::with_capacity(count);
    for task in tasks {
        ids.extend(
            task.await
                .expect("grant task")
                .map_err(|status| format!("granting leases: {status}"))?,
        );
    }
    Ok(ids)
}
