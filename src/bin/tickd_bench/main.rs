//! `tickd-bench`: benchmarks that each print one `name key=value ...` line, so runs can be
//! compared with each other and side by side with peers (see `benches/`).
#![deny(unsafe_code)]

mod allocator;
mod core;

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
}

fn main() {
    match Cli::parse().benchmark {
        Benchmark::Core(args) => core::run(args),
    }
}
