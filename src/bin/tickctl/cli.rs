//! The top of `tickctl`'s command line: the global flags (connection, `--namespace`,
//! `--output`) around one subcommand. Each subcommand's own flags live with it in `cmd/`;
//! the value parsers they share are in [`crate::values`].

use clap::Parser;

use crate::cmd::Command;
use crate::connection::Connection;
use crate::values::Output;

/// The help heading of `--namespace` and `--output`, which every subcommand takes; the
/// connection flags have their own (see [`Connection`]).
const GLOBAL_OPTIONS: &str = "Global options";

#[derive(Debug, Parser)]
#[command(
    name = "tickctl",
    version,
    about = "Command-line client of tickd, the timer service",
    after_help = "Durations are written like 1500ms, 30s, 5m, 2h or '1h 30m'.\n\
                  Exit codes: 0 ok, 1 the server refused the request (the gRPC code is named),\n\
                  2 bad usage, 3 tickd could not be reached."
)]
pub(crate) struct Cli {
    #[command(flatten)]
    pub(crate) connection: Connection,

    /// Namespace of the timers (empty: the default namespace; for `pending`, every namespace).
    #[arg(
        short,
        long,
        global = true,
        help_heading = GLOBAL_OPTIONS,
        env = "TICKCTL_NAMESPACE",
        default_value = "",
        hide_default_value = true
    )]
    pub(crate) namespace: String,

    /// Output format.
    #[arg(
        short,
        long,
        global = true,
        help_heading = GLOBAL_OPTIONS,
        env = "TICKCTL_OUTPUT",
        value_enum,
        default_value_t = Output::Text
    )]
    pub(crate) output: Output,

    #[command(subcommand)]
    pub(crate) command: Command,
}
