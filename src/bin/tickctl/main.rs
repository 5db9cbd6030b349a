//! `tickctl`: the command-line client of tickd, over its gRPC API. This file parses the
//! command line, connects, and hands over to the subcommand (one file each, in `cmd/`).
//!
//! ```text
//! tickctl add --delay 30m --key order-42 --payload 'close order 42' -n orders
//! tickctl pending -n orders            # a table; --output json for scripts
//! tickctl watch -n orders              # one line per expiration, until Ctrl-C
//! tickctl completion bash > /etc/bash_completion.d/tickctl
//! ```
//!
//! Exit codes: 0 ok; 1 the server refused the call (the message names the gRPC code);
//! 2 bad usage (clap's own errors, bad durations, unreadable files); 3 tickd unreachable.

mod cli;
mod cmd;
mod connection;
mod failure;
mod output;
use tickd::proto_json;
mod proto_time;
mod session;
mod streaming;
mod target;
mod values;

use std::process::ExitCode;

use clap::{CommandFactory, Parser};

use cli::Cli;
use failure::Failure;
use session::Session;

fn main() -> ExitCode {
    // Clap prints its own usage errors and exits with 2 (0 for --help and --version).
    let cli = Cli::parse();
    if let Some(exit_code) = cli.command.run_without_server(Cli::command) {
        return exit_code;
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => return Failure::Other(format!("starting the runtime: {error}")).report(),
    };
    match runtime.block_on(connect_and_run(cli)) {
        Ok(exit_code) => exit_code,
        Err(failure) => failure.report(),
    }
}

async fn connect_and_run(cli: Cli) -> Result<ExitCode, Failure> {
    let session = Session::connect(&cli.connection, cli.namespace, cli.output).await?;
    cli.command.run(&session).await
}
