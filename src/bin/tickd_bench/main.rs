//! `tickd-bench`: benchmarks that each print one `name key=value ...` line, so runs can be
//! compared with each other and side by side with peers (see `benches/`).
#![deny(unsafe_code)]

mod allocator;
mod client;
mod core;
mod cron;
mod e2e;
mod etcd;
mod keepalive;
mod push;
mod recover;
mod rpc;

use clap::{Parser, Subcommand};

#[global_allocator]
static ALLOCATOR: allocator::CountingAllocator = allocator::CountingAllocator;

#[derive(Parser)]
#[command(
    name = "tickd-bench",
    about = "Benchmarks for tickd; each prints one line"
)]
struct Cli {
    #[command(subcommand)]
    benchmark: Benchmark,
}

#[derive(Subcommand)]
enum Benchmark {
    /// The wheel worker alone, on the workload of shared/peers/netty/run.
    Core(core::CoreArgs),
    /// Cron timers registered and fired on the worker thread, against plain timers.
    Cron(cron::CronArgs),
    /// Unary NewTimeout, NewTimeouts batches or health Check in a closed loop against a server.
    Rpc(rpc::RpcArgs),
    /// Timers registered at a steady rate, received and acknowledged by subscribers: lateness.
    E2e(e2e::E2eArgs),
    /// Lease heartbeats over KeepAlive streams.
    Keepalive(keepalive::KeepAliveArgs),
    /// etcd's LeaseKeepAlive, driven like `keepalive` (side-by-side comparison).
    EtcdKeepalive(keepalive::KeepAliveArgs),
    /// etcd's LeaseGrant, driven like `rpc --mode unary` (side-by-side comparison).
    EtcdGrant(etcd::EtcdGrantArgs),
    /// Memory per pending timer and recovery time after a SIGKILL, on a real tickd process.
    Recover(recover::RecoverArgs),
}

fn main() {
    match Cli::parse().benchmark {
        Benchmark::Core(args) => core::run(args),
        Benchmark::Cron(args) => cron::run(args),
        Benchmark::Rpc(args) => rpc::run(args),
        Benchmark::E2e(args) => e2e::run(args),
        Benchmark::Keepalive(args) => keepalive::run(args),
        Benchmark::EtcdKeepalive(args) => etcd::run_keepalive(args),
        Benchmark::EtcdGrant(args) => etcd::run_grant(args),
        Benchmark::Recover(args) => recover::run(args),
    }
}
