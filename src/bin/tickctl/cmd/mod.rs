//! The subcommands, one file each: a clap `Args` type holding the subcommand's flags (its doc
//! comment is the line `tickctl --help` shows) and a `run` that makes its calls and prints.
//!
//! Adding a subcommand is a new file here, its `mod` line, its variant of [`Command`] (whose
//! order is the order of `--help`) and its arm in [`Command::run`].

mod ack;
mod add;
mod add_batch;
mod cancel;
mod completion;
mod consume;
mod get;
mod health;
mod keepalive;
mod man;
mod pending;
mod redrive;
mod reschedule;
mod sink;
mod touch;
mod watch;

use std::process::ExitCode;

use clap::Subcommand;

use crate::failure::Failure;
use crate::session::Session;

// No doc comment here: clap would apply it to tickctl's own help text, not to this enum's.
#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    Add(add::Add),
    AddBatch(add_batch::AddBatch),
    Cancel(cancel::Cancel),
    Get(get::Get),
    Reschedule(reschedule::Reschedule),
    Pending(pending::Pending),
    Touch(touch::Touch),
    Keepalive(keepalive::Keepalive),
    Watch(watch::Watch),
    Consume(consume::Consume),
    Ack(ack::Ack),
    Redrive(redrive::Redrive),
    Sink(sink::Sink),
    Health(health::Health),
    Completion(completion::Completion),
    Man(man::Man),
}

impl Command {
    /// Runs the subcommands that need no server (completions, the manual page), which must
    /// work with no tickd around: before connecting. None for the others. `definition` makes
    /// tickctl's whole command line, which both are generated from; it comes from `main`, so
    /// that the subcommands need not import the command line that imports them.
    pub(crate) fn run_without_server(
        &self,
        definition: impl FnOnce() -> clap::Command,
    ) -> Option<ExitCode> {
        match self {
            Command::Completion(completion) => Some(completion.run(definition())),
            Command::Man(man) => Some(man.run(definition())),
            _ => None,
        }
    }

    /// Runs the subcommand. Its exit code is 0, or 1 when the server refused part of the work
    /// (a timer of a batch, an unknown or not dead delivery id) or is not serving; whatever stops the
    /// subcommand as a whole is a [`Failure`].
    pub(crate) async fn run(self, session: &Session) -> Result<ExitCode, Failure> {
        match self {
            Command::Add(add) => add.run(session).await,
            Command::AddBatch(add_batch) => add_batch.run(session).await,
            Command::Cancel(cancel) => cancel.run(session).await,
            Command::Get(get) => get.run(session).await,
            Command::Reschedule(reschedule) => reschedule.run(session).await,
            Command::Pending(pending) => pending.run(session).await,
            Command::Touch(touch) => touch.run(session).await,
            Command::Keepalive(keepalive) => keepalive.run(session).await,
            Command::Watch(watch) => watch.run(session).await,
            Command::Consume(consume) => consume.run(session).await,
            Command::Ack(ack) => ack.run(session).await,
            Command::Redrive(redrive) => redrive.run(session).await,
            Command::Sink(sink) => sink.run(session).await,
            Command::Health(health) => health.run(session).await,
            Command::Completion(_) | Command::Man(_) => {
                unreachable!("main runs completion and man before connecting (run_without_server)")
            }
        }
    }
}
