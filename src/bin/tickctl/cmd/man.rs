//! `tickctl man`: the manual page, rendered by clap_mangen from the command line's own
//! definition (the help texts are the page's text); with `--dir`, one page per subcommand as
//! packagers install them. It needs no server.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;

use crate::failure::Failure;
use crate::output;

/// Print tickctl's manual page (roff: `tickctl man | man -l -`).
#[derive(Debug, Args)]
pub(crate) struct Man {
    /// Instead, write tickctl.1 and a page per subcommand (tickctl-add.1, ...) into this
    /// directory.
    #[arg(long, value_name = "DIR", conflicts_with = "markdown")]
    dir: Option<PathBuf>,
    /// Instead, print every flag with its environment variable and default as markdown
    /// tables (the flag reference of the documentation).
    #[arg(long)]
    markdown: bool,
}

impl Man {
    /// `definition` is tickctl's whole command line, handed down by `main` (which owns it).
    pub(crate) fn run(&self, definition: clap::Command) -> ExitCode {
        if self.markdown {
            output::print_bytes(tickd::reference::flag_tables(&definition).as_bytes());
            return ExitCode::SUCCESS;
        }
        let written = match &self.dir {
            Some(dir) => clap_mangen::generate_to(definition, dir).map_err(|error| {
                Failure::Other(format!(
                    "writing manual pages to {}: {error}",
                    dir.display()
                ))
            }),
            None => {
                let mut page = Vec::new();
                clap_mangen::Man::new(definition)
                    .render(&mut page)
                    .map(|()| output::print_bytes(&page))
                    .map_err(|error| Failure::Other(format!("rendering the manual page: {error}")))
            }
        };
        match written {
            Ok(()) => ExitCode::SUCCESS,
            Err(failure) => failure.report(),
        }
    }
}
